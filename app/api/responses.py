"""The OpenAI Responses API: POST /v1/responses, streamed and not.

Owns the body models, the conversion of `input` items (messages, `function_call`,
`function_call_output`, `reasoning`) to a `ChatRequest`, and the replies: output items
(`reasoning` with `reasoning_text` content, `message` with `output_text`, `function_call`) made
by `blocks.Blocks` from the run's events, whole or as the event sequence (response.created,
in_progress, output_item.added, content_part.added, *.delta, *.done, ..., then
response.completed, or response.incomplete at the token limit, or response.failed), every
event with its `sequence_number`. Runs on the asyncio loop's thread.

`text.format` of type `json_schema`: the schema is checked up front (400 naming the field),
generation is grammar-constrained when the model is not thinking (convert.json_schema_format),
and the final text is validated with `jsonschema`; output that does not match makes the
response `failed` with code `invalid_output` (its output is still there to inspect).

Shortcut on purpose: no server-side conversation state, so `previous_response_id` is refused
with a 400 saying to send the whole conversation (`store` is accepted and ignored).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import ConfigDict, Field, StrictBool

from app.api import convert, runs
from app.api import tool_choice as choices
from app.api.blocks import DELTA, OPEN, TEXT, THINKING, TOOL, Block, Blocks, Step, blocks_of
from app.api.convert import (
    Lenient,
    check_json_output,
    continues,
    decode_arguments,
    function_tool,
    json_schema_format,
    read_body,
    sampling,
    stop_tuple,
    text_of,
    thinking_from_effort,
    validate,
)
from app.api.errors import APIError
from app.api.sse import event_lines, sse_response
from app.api.state import get_state
from engine.chat.request import ChatRequest, Message
from engine.service import Run

router = APIRouter()


class MessageItem(Lenient):
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list


class FunctionCallItem(Lenient):
    call_id: str
    name: str
    arguments: str | dict | None = None


class FunctionCallOutputItem(Lenient):
    call_id: str
    output: str | list | dict | None = None


class ToolIn(Lenient):
    type: str = "function"
    name: str | None = None
    description: str | None = None
    parameters: dict | None = None
    function: dict | None = None  # the Chat Completions shape, which some clients send here


class TextFormat(Lenient):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    type: str = "text"
    name: str | None = None
    json_schema: dict | None = Field(None, alias="schema")


class TextIn(Lenient):
    format: TextFormat | None = None


class ReasoningIn(Lenient):
    effort: str | None = None


class ResponsesBody(Lenient):
    model: str = ""
    input: str | list[dict]
    instructions: str | None = None
    stream: bool = False
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    tools: list[ToolIn] | None = None
    tool_choice: str | dict | None = None
    parallel_tool_calls: StrictBool | None = None  # false: one call per reply; echoed
    guard_calls: StrictBool | None = None  # Prism's: false leaves calls unguarded
    reasoning_budget: Any = None  # Prism's: the thinking budget in tokens
    text: TextIn | None = None
    reasoning: ReasoningIn | None = None
    previous_response_id: str | None = None


def _reasoning_text(item: dict) -> str:
    parts = item.get("content") or item.get("summary") or []
    return "".join(p.get("text", "") for p in parts if isinstance(p, dict))


def convert_input(body: ResponsesBody) -> tuple[Message, ...]:
    out: list[Message] = []
    if body.instructions:
        out.append(Message("system", body.instructions))
    if isinstance(body.input, str):
        out.append(Message("user", body.input))
        return tuple(out)
    reasoning: str | None = None  # a reasoning item waits for the assistant turn it precedes
    for i, item in enumerate(body.input):
        field = f"input[{i}]"
        kind = item.get("type") or "message"
        if kind == "message":
            m = validate(MessageItem, item, field)
            role = "system" if m.role == "developer" else m.role
            text = text_of(m.content, f"{field}.content")
            if role == "assistant":
                out.append(Message("assistant", text, reasoning_content=reasoning))
                reasoning = None
            else:
                out.append(Message(role, text))
        elif kind == "function_call":
            fc = validate(FunctionCallItem, item, field)
            call = {"id": fc.call_id, "type": "function",
                    "function": {"name": fc.name,
                                 "arguments": decode_arguments(fc.arguments,
                                                               f"{field}.arguments")}}
            last = out[-1] if out else None
            if last is not None and last.role == "assistant" and reasoning is None:
                out[-1] = dataclasses.replace(last, tool_calls=(*last.tool_calls, call))
            else:
                out.append(Message("assistant", "", reasoning_content=reasoning,
                                   tool_calls=(call,)))
                reasoning = None
        elif kind == "function_call_output":
            fo = validate(FunctionCallOutputItem, item, field)
            output = fo.output if not isinstance(fo.output, dict) else json.dumps(fo.output)
            out.append(Message("tool", text_of(output, f"{field}.output"),
                               tool_call_id=fo.call_id))
        elif kind == "reasoning":
            reasoning = (reasoning or "") + _reasoning_text(item)
        # item_reference, images and other item kinds: nothing a local text model can use
    return tuple(out)


def to_chat_request(body: ResponsesBody) -> tuple[ChatRequest, dict | None]:
    """The request, and the JSON schema the output must match (if any)."""
    if body.previous_response_id:
        raise APIError("invalid_request", "previous_response_id is not supported: this server "
                       "keeps no conversation state; send the whole conversation in 'input'",
                       param="previous_response_id")
    if body.max_output_tokens is not None and body.max_output_tokens < 1:
        raise APIError("invalid_request", "'max_output_tokens' must be at least 1",
                       param="max_output_tokens")
    thinking = thinking_from_effort(body.reasoning.effort if body.reasoning else None)
    tools = []
    for i, t in enumerate(body.tools or ()):
        if t.type != "function":
            continue  # built-in tools (web search...) have no local implementation
        if not t.name and t.function and isinstance(t.function.get("name"), str):
            fn = t.function
            t = ToolIn(name=fn["name"], description=fn.get("description"),
                       parameters=fn.get("parameters"))
        if not t.name:
            raise APIError("invalid_request", f"Missing field 'tools[{i}].name'",
                           param=f"tools[{i}].name")
        tools.append(function_tool(t.name, t.description, t.parameters,
                                   f"tools[{i}].parameters"))
    choice = choices.responses(body.tool_choice, [t["function"]["name"] for t in tools])
    fmt = body.text.format if body.text else None
    schema, grammar = None, None
    if fmt is not None and fmt.type == "json_schema":
        grammar, thinking = json_schema_format(fmt.json_schema, "text.format.schema", thinking)
        schema = fmt.json_schema
    messages = convert_input(body)
    if not messages:
        raise APIError("invalid_request", "'input' holds no message", param="input")
    return ChatRequest(
        messages=messages,
        continue_final=continues(messages),  # a trailing assistant message is continued
        tools=choice.offered(tuple(tools)),
        sampling=sampling(body.temperature, body.top_p, body.top_k, seed=body.seed),
        max_tokens=body.max_output_tokens,
        stop=stop_tuple(body.stop),
        thinking=thinking,
        grammar=grammar,
        tool_choice=choice.mode,
        tool_name=choice.name,
        parallel_calls=body.parallel_tool_calls is not False,
        guard_calls=body.guard_calls,
        reasoning_budget=convert.reasoning_budget(
            body.reasoning_budget, body.reasoning.effort if body.reasoning else None),
        api="responses",
        model=body.model,
    ), schema


# --- output ---------------------------------------------------------------------------------


def item_id(run: Run, b: Block) -> str:
    prefix = {THINKING: "rs", TEXT: "msg"}.get(b.kind, "fc")
    return f"{prefix}_{run.id}_{b.position}"


def item_json(run: Run, b: Block, done: bool = True) -> dict:
    status = "completed" if done else "in_progress"
    text = b.text if done else ""
    if b.kind == THINKING:
        return {"type": "reasoning", "id": item_id(run, b), "summary": [],
                "content": [{"type": "reasoning_text", "text": text}] if done else [],
                "status": status}
    if b.kind == TEXT:
        return {"type": "message", "id": item_id(run, b), "status": status, "role": "assistant",
                "content": [_part(b, text)] if done else []}
    return {"type": "function_call", "id": item_id(run, b), "call_id": b.call_id,
            "name": b.name, "arguments": text, "status": status}


def _part(b: Block, text: str) -> dict:
    if b.kind == THINKING:
        return {"type": "reasoning_text", "text": text}
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def usage(run: Run) -> dict:
    prompt, cached, out = runs.usage_numbers(run)
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": runs.reasoning_tokens(run)},
            "total_tokens": prompt + out}


def response_json(run: Run, body: ResponsesBody, model: str, status: str,
                  output: list[dict], **extra: Any) -> dict:
    fmt = body.text.format if body.text and body.text.format else None
    return {
        "id": f"resp_{run.id}", "object": "response", "created_at": int(run.created),
        "status": status, "model": model, "output": output,
        "error": None, "incomplete_details": None,
        "instructions": body.instructions, "max_output_tokens": body.max_output_tokens,
        "parallel_tool_calls": run.request.parallel_calls,  # echoed as the request read it
        "previous_response_id": None,
        "reasoning": {"effort": body.reasoning.effort if body.reasoning else None,
                      "summary": None},
        "temperature": body.temperature, "top_p": body.top_p,
        "text": {"format": fmt.model_dump(by_alias=True, exclude_none=True) if fmt
                 else {"type": "text"}},
        "tool_choice": body.tool_choice or "auto",
        "tools": [t.model_dump(exclude_none=True) for t in body.tools or ()],
        "truncation": "disabled", "store": False, "metadata": {},
        "usage": None, **extra,
    }


def outcome(run: Run, blocks: list[Block], schema: dict | None) -> tuple[str, dict]:
    """(status, the fields that go with it) of a finished run."""
    res = runs.reply_result(run)
    assert res is not None
    extra: dict[str, Any] = {"usage": usage(run)}
    if res.finish_reason == "length":
        extra["incomplete_details"] = {"reason": "max_output_tokens"}
        return "incomplete", extra
    if schema is not None and res.finish_reason != "tool_calls":
        text = "".join(b.text for b in blocks if b.kind == TEXT)
        problem = check_json_output(text, schema)
        if problem is not None:
            extra["error"] = {"code": "invalid_output",
                              "message": f"text.format json_schema: {problem}"}
            return "failed", extra
    return "completed", extra


@router.post("/v1/responses")
async def responses(request: Request):
    state = get_state(request)
    body = await read_body(request, ResponsesBody)
    chat, schema = to_chat_request(body)
    run = await runs.submit(state, chat)
    model = state.reply_model(body.model)
    if body.stream:
        return await sse_response(request, run, Stream(run, body, model, schema).events(),
                                  lambda err: error_event(err, 0))
    await runs.finished(request, run)
    blocks = blocks_of(runs.reply_events(run))
    status, extra = outcome(run, blocks, schema)
    return JSONResponse(response_json(run, body, model, status,
                                      [item_json(run, b) for b in blocks], **extra))


def error_event(err: APIError, seq: int) -> str:
    return event_lines("error", {"type": "error", "code": err.code or err.kind,
                                 "message": err.message, "param": err.param,
                                 "sequence_number": seq})


class Stream:
    """The Responses event sequence for one run."""

    def __init__(self, run: Run, body: ResponsesBody, model: str, schema: dict | None):
        self.run, self.body, self.model, self.schema = run, body, model, schema
        self.seq = 0

    def event(self, type_: str, **fields: Any) -> str:
        data = {"type": type_, **fields, "sequence_number": self.seq}
        self.seq += 1
        return event_lines(type_, data)

    def steps(self, steps: list[Step]) -> str:
        out = []
        run = self.run
        for step in steps:
            op, b = step.op, step.block
            where = {"item_id": item_id(run, b), "output_index": b.position}
            if op == OPEN:
                out.append(self.event("response.output_item.added", output_index=b.position,
                                      item=item_json(run, b, done=False)))
                if b.kind != TOOL:
                    out.append(self.event("response.content_part.added", **where,
                                          content_index=0, part=_part(b, "")))
            elif op == DELTA:
                if b.kind == TEXT:
                    out.append(self.event("response.output_text.delta", **where,
                                          content_index=0, delta=step.text, logprobs=[]))
                elif b.kind == THINKING:
                    out.append(self.event("response.reasoning_text.delta", **where,
                                          content_index=0, delta=step.text))
                else:
                    out.append(self.event("response.function_call_arguments.delta", **where,
                                          delta=step.text))
            else:
                if b.kind == TEXT:
                    out.append(self.event("response.output_text.done", **where,
                                          content_index=0, text=b.text, logprobs=[]))
                elif b.kind == THINKING:
                    out.append(self.event("response.reasoning_text.done", **where,
                                          content_index=0, text=b.text))
                else:
                    out.append(self.event("response.function_call_arguments.done", **where,
                                          name=b.name, arguments=b.text))
                if b.kind != TOOL:
                    out.append(self.event("response.content_part.done", **where,
                                          content_index=0, part=_part(b, b.text)))
                out.append(self.event("response.output_item.done", output_index=b.position,
                                      item=item_json(run, b)))
        return "".join(out)

    async def events(self) -> AsyncIterator[str]:
        run, body, model = self.run, self.body, self.model
        start = response_json(run, body, model, "in_progress", [])
        yield self.event("response.created", response=start)
        yield self.event("response.in_progress", response=start)
        blocks = Blocks()
        async for ev in runs.reply_stream(run):
            steps = blocks.feed(ev)
            if steps:
                yield self.steps(steps)
        tail = blocks.finish()
        if tail:
            yield self.steps(tail)
        err = runs.run_error(run)
        if err is not None:
            failed = response_json(run, body, model, "failed", [],
                                   error={"code": err.code or "server_error",
                                          "message": err.message})
            yield self.event("response.failed", response=failed)
            return
        final = blocks.final()
        status, extra = outcome(run, final, self.schema)
        whole = response_json(run, body, model, status, [item_json(run, b) for b in final],
                              **extra)
        yield self.event(f"response.{status}", response=whole)
