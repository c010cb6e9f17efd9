"""The OpenAI Chat Completions API: /v1/chat/completions, /v1/models, /v1/models/{id}.

Owns the request body models, their conversion to a `ChatRequest`, and the two reply shapes
built from one run: a stream of `chat.completion.chunk`s (SSE, ending `data: [DONE]`) and a
`chat.completion` built from the run's result. Both come from the same parser events (as
`runs.reply_stream` / `runs.reply_result` give them: a request without tools gets calls as
text), so they cannot disagree. Runs on the asyncio loop's thread.

Event -> delta: reasoning -> `reasoning_content` (or `reasoning`, or both: ServerConfig's
`reasoning_field`), content -> `content`, tool_start -> a tool_calls entry with index, id,
type and name and empty arguments, tool_args -> the same index with an arguments fragment.
Markup and anomalies send nothing. `finish_reason` is "tool_calls" exactly when a call
completed, else "stop" or "length". The hot path (one chunk per reasoning/content event) is
a preformatted prefix + one JSON string + suffix, not a dict round trip through json.
`logprobs`/`top_logprobs` (0-20): each content chunk, and the whole reply, carries its content
tokens' logprobs in OpenAI's chat shape (app/api/chat_logprobs.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import StrictBool

from app.api import convert, models, runs
from app.api import tool_choice as choices
from app.api.chat_logprobs import MAX_TOP_LOGPROBS, ContentTokens, engine_top
from app.api.convert import (
    Lenient,
    continues,
    decode_arguments,
    function_tool,
    json_schema_format,
    read_body,
    sampling,
    stop_tuple,
    text_of,
    thinking_from_effort,
)
from app.api.errors import APIError, openai_error_body
from app.api.sse import data_line, dumps, sse_response
from app.api.state import AppState, get_state
from engine.chat.detect import format_label
from engine.chat.request import ChatRequest, Message
from engine.parse.events import CONTENT, REASONING, TOOL_ARGS, TOOL_CALL, TOOL_START
from engine.service import Run

router = APIRouter()
FINGERPRINT = "prism"


class FunctionCallIn(Lenient):
    name: str
    arguments: str | dict | None = None


class ToolCallIn(Lenient):
    id: str | None = None
    type: str = "function"
    function: FunctionCallIn


class MessageIn(Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class FunctionIn(Lenient):
    name: str
    description: str | None = None
    parameters: dict | None = None


class ToolIn(Lenient):
    type: str = "function"
    function: FunctionIn


class StreamOptions(Lenient):
    include_usage: bool = False


class ChatBody(Lenient):
    model: str = ""
    messages: list[MessageIn]
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repeat_penalty: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int | None = None
    tools: list[ToolIn] | None = None
    tool_choice: str | dict | None = None
    parallel_tool_calls: StrictBool | None = None  # false: one call per reply
    guard_calls: StrictBool | None = None  # Prism's: false leaves calls unguarded
    chat_template_kwargs: dict | None = None
    reasoning_effort: str | None = None
    reasoning_budget: Any = None  # Prism's (and llama.cpp's): the thinking budget in tokens
    enable_thinking: bool | None = None
    response_format: dict | None = None
    continue_final_message: bool | None = None  # vLLM
    add_generation_prompt: bool | None = None  # vLLM, llama.cpp
    logprobs: StrictBool | None = None
    top_logprobs: int | None = None

    @property
    def logprobs_k(self) -> int | None:
        """Alternatives per content token the reply lists; None: no `logprobs` at all."""
        return (self.top_logprobs or 0) if self.logprobs else None


def convert_messages(body: ChatBody) -> tuple[Message, ...]:
    out = []
    for i, m in enumerate(body.messages):
        field = f"messages[{i}]"
        role = {"developer": "system", "function": "tool"}.get(m.role, m.role)
        calls = []
        for j, c in enumerate(m.tool_calls or ()):
            args = decode_arguments(c.function.arguments,
                                    f"{field}.tool_calls[{j}].function.arguments")
            calls.append({"id": c.id or f"call_{i}_{j}", "type": "function",
                          "function": {"name": c.function.name, "arguments": args}})
        reasoning = m.reasoning_content if m.reasoning_content is not None else m.reasoning
        out.append(Message(
            role=role,
            content=text_of(m.content, f"{field}.content"),
            reasoning_content=reasoning if role == "assistant" else None,
            tool_calls=tuple(calls),
            tool_call_id=m.tool_call_id,
            name=m.name,
        ))
    return tuple(out)


def to_chat_request(body: ChatBody) -> ChatRequest:
    if not body.messages:
        raise APIError("invalid_request", "'messages' must hold at least one message",
                       param="messages")
    if body.n is not None and body.n != 1:
        raise APIError("invalid_request", "Only n=1 is supported (one model, one reply)",
                       param="n")
    # max_completion_tokens: 0 is a value (refused, as OpenAI does), not "unset"
    limit = "max_tokens" if body.max_completion_tokens is None else "max_completion_tokens"
    max_tokens = getattr(body, limit)
    if max_tokens is not None and max_tokens < 1:
        raise APIError("invalid_request", f"'{limit}' must be at least 1", param=limit)
    if body.top_logprobs is not None and not 0 <= body.top_logprobs <= MAX_TOP_LOGPROBS:
        raise APIError("invalid_request", f"'top_logprobs' must be between 0 and "
                       f"{MAX_TOP_LOGPROBS}", param="top_logprobs")
    if body.top_logprobs and not body.logprobs:
        raise APIError("invalid_request", "'top_logprobs' needs 'logprobs': true",
                       param="top_logprobs")
    thinking = thinking_from_effort(body.reasoning_effort)
    if body.enable_thinking is not None:
        thinking = body.enable_thinking
    kwargs = body.chat_template_kwargs or {}
    if isinstance(kwargs.get("enable_thinking"), bool):
        thinking = kwargs["enable_thinking"]
    tools = tuple(function_tool(t.function.name, t.function.description, t.function.parameters,
                                f"tools[{i}].function.parameters")
                  for i, t in enumerate(body.tools or ()))
    choice = choices.openai(body.tool_choice, [t.function.name for t in body.tools or ()])
    grammar = None
    fmt = body.response_format or {}
    if fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema") or {}
        grammar, thinking = json_schema_format(
            spec.get("schema") if isinstance(spec, dict) else None,
            "response_format.json_schema.schema", thinking)
    messages = convert_messages(body)
    # vLLM's continue_final_message, or llama.cpp's add_generation_prompt false; neither sent:
    # a trailing assistant message is continued (llama.cpp's prefill).
    asked = body.continue_final_message
    if asked is None and body.add_generation_prompt is not None:
        asked = not body.add_generation_prompt
    return ChatRequest(
        messages=messages,
        continue_final=continues(messages, asked),
        add_generation_prompt=body.add_generation_prompt is not False,
        tools=choice.offered(tools),
        sampling=sampling(body.temperature, body.top_p, body.top_k, body.min_p,
                          body.repeat_penalty, body.seed),
        max_tokens=max_tokens,
        stop=stop_tuple(body.stop),
        thinking=thinking,
        grammar=grammar,
        tool_choice=choice.mode,
        tool_name=choice.name,
        parallel_calls=body.parallel_tool_calls is not False,
        guard_calls=body.guard_calls,
        reasoning_budget=convert.reasoning_budget(body.reasoning_budget, body.reasoning_effort),
        api="openai",
        model=body.model,
        top_logprobs=engine_top(bool(body.logprobs), body.top_logprobs or 0),
    )


def usage(run: Run) -> dict:
    prompt, cached, out = runs.usage_numbers(run)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": out,
        "total_tokens": prompt + out,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": runs.reasoning_tokens(run)},
    }


def reasoning_keys(state: AppState) -> tuple[str, ...]:
    field = state.config.reasoning_field
    return ("reasoning_content", "reasoning") if field == "both" else (field,)


# --- routes ---------------------------------------------------------------------------------


@router.post("/v1/chat/completions")
async def chat_completions(request: Request):
    state = get_state(request)
    body = await read_body(request, ChatBody)
    run = await runs.submit(state, to_chat_request(body))
    model = state.reply_model(body.model)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return await sse_response(request, run,
                                  stream_chunks(state, run, model, include_usage,
                                                body.logprobs_k), error_event)
    await runs.finished(request, run)
    return JSONResponse(completion(state, run, model, body.logprobs_k))


def content_logprobs(run: Run, k: int | None) -> dict | None:
    """`choices[0].logprobs` of a whole reply: its content tokens (app/api/chat_logprobs.py)."""
    if k is None:
        return None
    walk = ContentTokens(run.tokens, k)
    entries = [e for ev in runs.reply_events(run) if ev.kind == CONTENT
               for e in walk.within(ev.span)]
    return {"content": entries, "refusal": None}


def completion(state: AppState, run: Run, model: str, logprobs_k: int | None = None) -> dict:
    res = runs.reply_result(run)
    assert res is not None
    message: dict[str, Any] = {"role": "assistant",
                               "content": res.content or (None if res.tool_calls else "")}
    if res.reasoning:
        for key in reasoning_keys(state):
            message[key] = res.reasoning
    if res.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments_json}}
            for c in res.tool_calls
        ]
    return {
        "id": f"chatcmpl-{run.id}",
        "object": "chat.completion",
        "created": int(run.created),
        "model": model,
        "system_fingerprint": FINGERPRINT,
        "choices": [{"index": 0, "message": message,
                     "logprobs": content_logprobs(run, logprobs_k),
                     "finish_reason": res.finish_reason}],
        "usage": usage(run),
        "timings": runs.llama_timings(run),
    }


def error_event(err: APIError) -> str:
    return data_line(openai_error_body(err)) + "data: [DONE]\n\n"


async def stream_chunks(state: AppState, run: Run, model: str, include_usage: bool,
                        logprobs_k: int | None = None) -> AsyncIterator[str]:
    head = {"id": f"chatcmpl-{run.id}", "object": "chat.completion.chunk",
            "created": int(run.created), "model": model, "system_fingerprint": FINGERPRINT}
    # '{"id":...,"choices":[{"index":0,"delta":' + delta + ',"logprobs":null,...}]}'
    prefix = "data: " + dumps(head)[:-1] + ',"choices":[{"index":0,"delta":'
    suffix = ',"logprobs":null,"finish_reason":null}]}\n\n'
    r_keys = reasoning_keys(state)
    walk = ContentTokens(run.tokens, logprobs_k) if logprobs_k is not None else None

    def chunk(delta: dict) -> str:
        return prefix + dumps(delta) + suffix

    yield chunk({"role": "assistant", "content": ""})
    started: set[int] = set()
    async for ev in runs.reply_stream(run):
        kind = ev.kind
        if kind == CONTENT:
            if ev.text and walk is not None:  # the chunk carries its tokens' logprobs
                yield (prefix + '{"content":' + dumps(ev.text) + '},"logprobs":{"content":'
                       + dumps(walk.within(ev.span)) + ',"refusal":null},"finish_reason":null}]}'
                       + "\n\n")
            elif ev.text:
                yield prefix + '{"content":' + dumps(ev.text) + "}" + suffix
        elif kind == REASONING:
            if ev.text:
                yield chunk(dict.fromkeys(r_keys, ev.text))
        elif kind == TOOL_START:
            started.add(ev.index)
            yield chunk({"tool_calls": [{"index": ev.index, "id": ev.call_id, "type": "function",
                                         "function": {"name": ev.text, "arguments": ""}}]})
        elif kind == TOOL_ARGS:
            if ev.text:
                yield chunk({"tool_calls": [{"index": ev.index,
                                             "function": {"arguments": ev.text}}]})
        elif kind == TOOL_CALL and ev.call is not None and ev.call.index not in started:
            c = ev.call  # a call that was not streamed: send it whole
            yield chunk({"tool_calls": [{"index": c.index, "id": c.id, "type": "function",
                                         "function": {"name": c.name,
                                                      "arguments": c.arguments_json}}]})
    err = runs.run_error(run)
    if err is not None:
        yield error_event(err)
        return
    res = runs.reply_result(run)
    assert res is not None
    final = {**head, "choices": [{"index": 0, "delta": {}, "logprobs": None,
                                  "finish_reason": res.finish_reason}],
             "timings": runs.llama_timings(run)}
    yield data_line(final)
    if include_usage:
        yield data_line({**head, "choices": [], "usage": usage(run)})
    yield "data: [DONE]\n\n"


@router.get("/v1/models")
async def list_models(request: Request):
    """Every model, with its `status` (app/api/models.py: llama.cpp's router shape)."""
    return {"object": "list", "data": models.model_cards(request)}


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request):
    state = get_state(request)
    if state.catalog is not None:
        wanted = models.resolve(state.catalog, model_id)
        return next(c for c in models.model_cards(request) if c["id"] == wanted)
    card = models.model_cards(request)[0]
    known = {card["id"], state.service.engine.name, state.service.pack.name}
    if model_id not in known:
        raise APIError("not_found", f"The model '{model_id}' does not exist; this server "
                       f"serves '{card['id']}'", param="model", code="model_not_found")
    return card


def model_card(request: Request) -> dict:
    state = get_state(request)
    svc = state.service
    return {
        "id": state.model_id,
        "object": "model",
        "created": int(request.app.state.started),
        "owned_by": "prism",
        "context_length": svc.engine.n_ctx,
        "meta": {"engine": svc.engine.name, "pack": svc.pack.name,
                 "family": svc.pack.family, "thinking": svc.pack.thinking,
                 "format": format_label(svc.pack.family, svc.pack.format_unknown)},
    }
