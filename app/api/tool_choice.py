"""`tool_choice` in each API's spelling, read into one neutral value.

Owns `ToolChoice` (with `offered`: the tools the prompt declares under it) and `openai`,
`anthropic`, `responses` (each: the request's value and its tool names -> a ToolChoice, or a
400 naming the field). Each tool's parameters are checked where the tool is built
(app/api/convert.py, `function_tool`). Runs on the asyncio loop's thread.

What each mode does (engine/service.py applies it): "auto" lets the model decide; "none" drops
the tools from the prompt; "required" and "function" make the llama engine sample under a
grammar in the pack's tool-call family (engine/grammar/), so the reply is a call,
as llama.cpp's server does. Values the API does not define are refused rather than read as
"auto": a client that asked for a call must not silently get prose.

    OpenAI chat:  "auto" | "none" | "required" | {"type": "function", "function": {"name"}}
    Anthropic:    {"type": "auto" | "any" | "none"} | {"type": "tool", "name"}
    Responses:    "auto" | "none" | "required" | {"type": "function", "name"}

Parallel calls: Anthropic spells "one call per reply" inside tool_choice
(`disable_parallel_tool_use: true`), read here into `ToolChoice.parallel_calls`; the OpenAI
APIs spell it beside it (`parallel_tool_calls: false`), read by their body models. Either way
it becomes `ChatRequest.parallel_calls` (engine/chat/request.py says what it does).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.api.errors import APIError


@dataclass(frozen=True, slots=True)
class ToolChoice:
    mode: str = "auto"  # auto | none | required | function
    name: str | None = None  # with mode "function"
    parallel_calls: bool = True  # Anthropic's `disable_parallel_tool_use`, negated

    def offered(self, tools: tuple[dict, ...]) -> tuple[dict, ...]:
        """The request's tools as the prompt declares them: none under mode "none"."""
        return () if self.mode == "none" else tools


AUTO = ToolChoice()


def _bad(message: str, field: str) -> APIError:
    return APIError("invalid_request", message, param=field, code="invalid_tool_choice")


def _named(name: Any, names: Sequence[str], field: str) -> ToolChoice:
    if not isinstance(name, str) or not name:
        raise _bad(f"'{field}' must name a function", field)
    if name not in names:
        known = ", ".join(repr(n) for n in names) or "none"
        raise _bad(f"'{field}' names the function {name!r}, which is not among the request's "
                   f"tools ({known})", field)
    return ToolChoice("function", name)


def _needs_tools(choice: ToolChoice, names: Sequence[str], field: str) -> ToolChoice:
    if choice.mode == "required" and not names:
        raise _bad(f"'{field}' requires a tool call, but the request has no tools", field)
    if choice.mode == "required" and not any(isinstance(n, str) and n for n in names):
        # a call names its tool: one named "" can be neither forced nor parsed
        raise _bad(f"'{field}' requires a tool call, but none of the request's tools has a "
                   "name", field)
    return choice


def _mode(value: str, names: Sequence[str], field: str, named: str) -> ToolChoice:
    """The OpenAI APIs' mode strings; `named` spells the API's named-function form."""
    if value in ("auto", "none", "required"):
        return _needs_tools(ToolChoice(value), names, field)
    raise _bad(f"Invalid value for '{field}': {value!r}; expected 'auto', 'none', 'required' "
               f"or {named}", field)


def openai(value: Any, names: Sequence[str], field: str = "tool_choice") -> ToolChoice:
    """Chat Completions' tool_choice."""
    if value is None:
        return AUTO
    if isinstance(value, str):
        return _mode(value, names, field, "{'type': 'function', 'function': {'name': ...}}")
    if isinstance(value, dict) and value.get("type") == "function":
        fn = value.get("function")
        return _named(fn.get("name") if isinstance(fn, dict) else None, names,
                      f"{field}.function.name")
    raise _bad(f"Invalid value for '{field}': expected 'auto', 'none', 'required' or "
               "{'type': 'function', 'function': {'name': ...}}", field)


def anthropic(value: Any, names: Sequence[str], field: str = "tool_choice") -> ToolChoice:
    """Messages' tool_choice: an object with a type."""
    if value is None:
        return AUTO
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "none":
        return ToolChoice("none")
    if kind in ("auto", "any", "tool"):
        assert isinstance(value, dict)
        off = value.get("disable_parallel_tool_use", False)
        if not isinstance(off, bool):
            raise _bad(f"'{field}.disable_parallel_tool_use' must be a boolean, not "
                       f"{type(off).__name__}", f"{field}.disable_parallel_tool_use")
        if kind == "auto":
            choice = AUTO
        elif kind == "any":
            choice = _needs_tools(ToolChoice("required"), names, field)
        else:
            choice = _named(value.get("name"), names, f"{field}.name")
        return dataclasses.replace(choice, parallel_calls=not off)
    raise _bad(f"Invalid value for '{field}': expected an object whose type is 'auto', 'any', "
               "'tool' (with 'name') or 'none'", field)


def responses(value: Any, names: Sequence[str], field: str = "tool_choice") -> ToolChoice:
    """Responses' tool_choice: a mode string, or a function named at the top level."""
    if value is None:
        return AUTO
    if isinstance(value, str):
        return _mode(value, names, field, "{'type': 'function', 'name': ...}")
    if isinstance(value, dict) and value.get("type") == "function":
        return _named(value.get("name"), names, f"{field}.name")
    raise _bad(f"Invalid value for '{field}': this server has function tools only; expected "
               "'auto', 'none', 'required' or {'type': 'function', 'name': ...}", field)
