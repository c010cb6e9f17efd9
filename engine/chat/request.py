"""Dialect-neutral request types: what every API adapter and the GUI's compose box build.

Owns `ChatRequest` and `Message`, frozen dataclasses shared by the server (which converts its
OpenAI / Anthropic / Responses bodies into them), the GUI and the service. No I/O; any thread
may build or read them (a request crosses from the server's loop or the GUI to the engine).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Message:
    """One chat turn in the shape chat templates expect.

    content is a plain string (API adapters flatten parts). tool_calls are OpenAI-shaped
    dicts `{"id", "type": "function", "function": {"name", "arguments": <dict>}}`, with the
    arguments already decoded to an object, as Qwen/Hermes templates iterate them.
    """

    role: str
    content: str = ""
    reasoning_content: str | None = None
    tool_calls: tuple[dict, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def to_template(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.reasoning_content is not None:
            d["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            d["tool_calls"] = [dict(c) for c in self.tool_calls]
        if self.tool_call_id is not None:
            d["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            d["name"] = self.name
        return d


# Whether a request's tool calls stream (tool_start, tool_args) as they are written. Every API
# streams them, so this is the default of a request, of its recording and of its replay.
STREAM_TOOLS = True


@dataclass(frozen=True, slots=True)
class Sampling:
    """Sampler settings. The defaults are llama.cpp server's; /props reports them."""

    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A chat request, whichever API it came in through.

    tools: OpenAI-style `[{"type": "function", "function": {name, description, parameters}}]`.
    thinking: None means the pack's default.
    grammar: optional GBNF text to constrain generation (tests, structured output).
    tool_choice: "auto" (the model decides), "none" (tools left out), "required" (a call to
    any tool) or "function" (a call to `tool_name`); the last two are enforced with a grammar
    in the pack's tool-call family (engine/grammar/).
    parallel_calls: False when the client allows one call per reply (OpenAI's
    `parallel_tool_calls: false`, Anthropic's `disable_parallel_tool_use: true`): the client
    gets the first complete call only (engine/parse/filters.py, `FirstCallOnly`), and a forced
    call's grammar allows exactly one.
    guard_calls: None (the server's default: on), True or False: once the model opens a real
    call under tool_choice "auto", the rest of it follows the tool's schema
    (engine/backends/llama/guard.py). A request field `guard_calls` in every API sets it.
    reasoning_budget: the most tokens the reasoning may hold before the family's close is
    forced (engine/chat/budget.py); 0: no reasoning; None: the server's --reasoning-budget.
    api: the client it came from, for the request log ("openai", "anthropic", "responses",
    "gui", "replay"). Not to be confused with the pack's tool-call family.
    """

    messages: tuple[Message, ...]
    tools: tuple[dict, ...] = ()
    sampling: Sampling = field(default_factory=Sampling)
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    thinking: bool | None = None
    stream_tools: bool = STREAM_TOOLS
    grammar: str | None = None
    tool_choice: str = "auto"
    tool_name: str | None = None
    parallel_calls: bool = True
    guard_calls: bool | None = None
    reasoning_budget: int | None = None
    top_logprobs: int = 0
    api: str = "openai"
    model: str = ""
    add_generation_prompt: bool = True
    # The last message is an assistant turn to continue (a prefill), not to close: Open WebUI's
    # "Continue Response", Anthropic's prefill, vLLM's continue_final_message (issue 9, item 3).
    continue_final: bool = False


def one_call_only(request: ChatRequest | dict | None) -> bool:
    """Does this request (or its recorded dict) allow one call per reply? Only a request that
    declares tools: without any, a call is answered as text (app/api/runs.py) and is no call."""
    if request is None:
        return False
    if isinstance(request, dict):
        return bool(request.get("tools")) and request.get("parallel_calls") is False
    return bool(request.tools) and not request.parallel_calls
