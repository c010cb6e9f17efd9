"""The Anthropic Messages API: /v1/messages (a `?beta=true` query is fine) and
/v1/messages/count_tokens.

Owns the body models, their conversion to a `ChatRequest` (tool_use / tool_result blocks become
assistant tool_calls and `tool` turns; thinking blocks become the turn's reasoning), and the two
reply shapes: the `event:` stream (message_start, content_block_start/delta/stop, message_delta,
message_stop) and a whole `message`. Both are made by `blocks.Blocks` from the same parser
events. Runs on the asyncio loop's thread.

Blocks: reasoning -> `thinking` (with an empty signature: there is nothing to sign), content ->
`text`, calls -> `tool_use` fed by `input_json_delta`. stop_reason: `tool_use` when a call
completed, `max_tokens` at the length limit, `stop_sequence` on a stop string (see
`runs.stop_sequence`), else `end_turn`. Errors use Anthropic's `{"type": "error", ...}` shape.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import StrictBool

from app.api import convert, models, runs
from app.api import tool_choice as choices
from app.api.blocks import CLOSE, OPEN, TEXT, THINKING, Block, Blocks, Step, blocks_of
from app.api.convert import (
    Lenient,
    continues,
    function_tool,
    read_body,
    sampling,
    stop_tuple,
    text_of,
)
from app.api.errors import APIError, anthropic_error_body, from_exception
from app.api.sse import dumps, event_lines, sse_response
from app.api.state import get_state
from app.api.validate import NON_TEXT_PARTS, not_text
from engine.chat.request import ChatRequest, Message
from engine.service import Run

router = APIRouter()


class BlockIn(Lenient):
    type: str
    text: str | None = None
    thinking: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict | None = None
    tool_use_id: str | None = None
    content: str | list | None = None
    is_error: bool | None = None


class MessageIn(Lenient):
    # "system" mid-conversation: Claude Code's mid-conversation-system beta (issue 9, item 1);
    # it is rendered where it stands, as the OpenAI route renders a system message.
    role: Literal["user", "assistant", "system"]
    content: str | list[BlockIn]


class ToolIn(Lenient):
    name: str
    description: str | None = None
    input_schema: dict | None = None


class ThinkingIn(Lenient):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = None


class MessagesBody(Lenient):
    model: str = ""
    messages: list[MessageIn]
    system: str | list | None = None
    max_tokens: int | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    tools: list[ToolIn] | None = None
    tool_choice: dict | None = None
    thinking: ThinkingIn | None = None
    guard_calls: StrictBool | None = None  # Prism's: false leaves calls unguarded


def convert_messages(body: MessagesBody) -> tuple[Message, ...]:
    out: list[Message] = []
    system = text_of(body.system, "system")
    if system:
        out.append(Message("system", system))
    for i, m in enumerate(body.messages):
        if isinstance(m.content, str):
            out.append(Message(m.role, m.content))
            continue
        if m.role == "system":
            out.append(Message("system", text_of([b.model_dump() for b in m.content],
                                                 f"messages[{i}].content")))
            continue
        texts: list[str] = []
        thinking: list[str] = []
        calls: list[dict] = []
        for j, b in enumerate(m.content):
            field = f"messages[{i}].content[{j}]"
            if b.type == "text":
                texts.append(b.text or "")
            elif b.type == "thinking" and m.role == "assistant":
                thinking.append(b.thinking or "")
            elif b.type == "tool_use" and m.role == "assistant":
                if not b.name:
                    raise APIError("invalid_request", f"Missing field '{field}.name'",
                                   param=f"{field}.name")
                calls.append({"id": b.id or f"toolu_{i}_{j}", "type": "function",
                              "function": {"name": b.name, "arguments": b.input or {}}})
            elif b.type == "tool_result":
                if not b.tool_use_id:
                    raise APIError("invalid_request", f"Missing field '{field}.tool_use_id'",
                                   param=f"{field}.tool_use_id")
                out.append(Message("tool", text_of(b.content, f"{field}.content"),
                                   tool_call_id=b.tool_use_id))
            elif b.type in NON_TEXT_PARTS:  # refused, not dropped (issue 10, item 6)
                raise not_text(b.type, field)
            # redacted thinking, server tool results: nothing a local text model can use
        if m.role == "assistant":
            out.append(Message("assistant", "".join(texts),
                               reasoning_content="".join(thinking) if thinking else None,
                               tool_calls=tuple(calls)))
        elif texts or not any(b.type == "tool_result" for b in m.content):
            out.append(Message("user", "\n".join(texts)))
    return tuple(out)


def to_chat_request(body: MessagesBody) -> ChatRequest:
    if not body.messages:
        raise APIError("invalid_request", "'messages' must hold at least one message",
                       param="messages")
    if body.max_tokens is not None and body.max_tokens < 1:
        raise APIError("invalid_request", "'max_tokens' must be at least 1", param="max_tokens")
    thinking = budget = None
    if body.thinking is not None:
        thinking = body.thinking.type != "disabled"
        # Disabled: no reasoning even where the template opens it; enabled: its budget_tokens.
        budget = 0 if not thinking else convert.reasoning_budget(
            body.thinking.budget_tokens, field="thinking.budget_tokens")
    tools = tuple(function_tool(t.name, t.description, t.input_schema,
                                f"tools[{i}].input_schema")
                  for i, t in enumerate(body.tools or ()))
    choice = choices.anthropic(body.tool_choice, [t.name for t in body.tools or ()])
    messages = convert_messages(body)
    return ChatRequest(
        messages=messages,
        continue_final=continues(messages),  # a trailing assistant turn is a prefill
        tools=choice.offered(tools),
        sampling=sampling(body.temperature, body.top_p, body.top_k),
        max_tokens=body.max_tokens,
        stop=stop_tuple(body.stop_sequences),
        thinking=thinking,
        tool_choice=choice.mode,
        tool_name=choice.name,
        parallel_calls=choice.parallel_calls,
        guard_calls=body.guard_calls,
        reasoning_budget=budget,
        api="anthropic",
        model=body.model,
    )


def stop_reason(run: Run) -> tuple[str, str | None]:
    res = runs.reply_result(run)
    assert res is not None
    if res.finish_reason == "tool_calls":
        return "tool_use", None
    if res.finish_reason == "length":
        return "max_tokens", None
    seq = runs.stop_sequence(run)
    return ("stop_sequence", seq) if seq is not None else ("end_turn", None)


def usage(run: Run) -> dict:
    prompt, cached, out = runs.usage_numbers(run)
    return {"input_tokens": prompt - cached, "output_tokens": out,
            "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0}


def block_json(b: Block) -> dict:
    if b.kind == THINKING:
        return {"type": "thinking", "thinking": b.text, "signature": ""}
    if b.kind == TEXT:
        return {"type": "text", "text": b.text}
    return {"type": "tool_use", "id": b.call_id, "name": b.name, "input": b.arguments or {}}


# --- routes ---------------------------------------------------------------------------------


@router.post("/v1/messages")
async def messages(request: Request):
    state = get_state(request)
    body = await read_body(request, MessagesBody)
    run = await runs.submit(state, to_chat_request(body))
    model = state.reply_model(body.model)
    if body.stream:
        return await sse_response(request, run, stream_events(run, model), error_event)
    await runs.finished(request, run)
    reason, seq = stop_reason(run)
    return JSONResponse({
        "id": f"msg_{run.id}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [block_json(b) for b in blocks_of(runs.reply_events(run))],
        "stop_reason": reason,
        "stop_sequence": seq,
        "usage": usage(run),
    })


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request):
    state = get_state(request)
    body = await read_body(request, MessagesBody)
    chat = to_chat_request(body)
    lease = await models.lease_for(state, chat.model)  # counted by the model's vocabulary
    try:
        n = await asyncio.to_thread(models.service_of(state, lease).count_tokens, chat)
    except Exception as e:  # a template that refuses the conversation -> 400
        raise from_exception(e) from e
    finally:
        if lease is not None:
            lease.release()
    return {"input_tokens": n}


def error_event(err: APIError) -> str:
    return event_lines("error", anthropic_error_body(err))


_DELTA_TYPES = {THINKING: ("thinking_delta", "thinking"), TEXT: ("text_delta", "text")}


def _open_json(b: Block) -> dict[str, Any]:
    if b.kind == THINKING:
        block: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
    elif b.kind == TEXT:
        block = {"type": "text", "text": ""}
    else:
        block = {"type": "tool_use", "id": b.call_id, "name": b.name, "input": {}}
    return {"type": "content_block_start", "index": b.position, "content_block": block}


async def stream_events(run: Run, model: str) -> AsyncIterator[str]:
    yield event_lines("message_start", {"type": "message_start", "message": {
        "id": f"msg_{run.id}", "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": run.prompt_tokens, "output_tokens": 0}}})
    blocks = Blocks()

    def send(steps: list[Step]) -> str:
        out = []
        for step in steps:
            op, blk = step.op, step.block
            if op == OPEN:
                out.append(event_lines("content_block_start", _open_json(blk)))
            elif op == CLOSE:
                out.append(event_lines("content_block_stop",
                                       {"type": "content_block_stop", "index": blk.position}))
            elif blk.kind in _DELTA_TYPES:
                dtype, key = _DELTA_TYPES[blk.kind]
                out.append(
                    'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
                    f'{blk.position},"delta":{{"type":"{dtype}","{key}":{dumps(step.text)}}}}}\n\n'
                )
            else:
                out.append(event_lines("content_block_delta", {
                    "type": "content_block_delta", "index": blk.position,
                    "delta": {"type": "input_json_delta", "partial_json": step.text}}))
        return "".join(out)

    async for ev in runs.reply_stream(run):
        steps = blocks.feed(ev)
        if steps:
            yield send(steps)
    tail = blocks.finish()
    if tail:
        yield send(tail)
    err = runs.run_error(run)
    if err is not None:
        yield error_event(err)
        return
    reason, seq = stop_reason(run)
    yield event_lines("message_delta", {"type": "message_delta",
                                        "delta": {"stop_reason": reason, "stop_sequence": seq},
                                        "usage": usage(run)})
    yield event_lines("message_stop", {"type": "message_stop"})
