"""Chat template rendering: a request's messages and tools → the prompt text a model sees.

Owns `ChatTemplate` (a jinja2 chat template compiled in the sandbox of engine/chat/sandbox.py),
`TemplateError` and `repair_history` (close a thinking block that swallowed a tool call in an
earlier turn). Pure Python, no I/O; it runs on whichever thread builds the request (the asyncio
loop for the server, the GUI thread for the compose box). A compiled `ChatTemplate` is
immutable and can be shared between threads.

Rendering follows transformers' `apply_chat_template` on purpose, so a template behaves here as
it does on the Hub: a sandbox (`trim_blocks`, `lstrip_blocks`), the `loopcontrols` extension,
transformers' `tojson` (no HTML escaping, non-ASCII kept), the `raise_exception` and
`strftime_now` globals, `tools=None` when there are none, and the special tokens passed as
variables. tests/engine/chat/golden/chat_golden.json pins that byte for byte.

Where transformers refuses a template that llama.cpp runs, Prism runs it as llama.cpp does
(issue 19, item 5; tests/engine/chat/test_template_compat.py, against the real templates):
- The sandbox is transformers' immutable one, except that `append` and `pop` work on the lists
  the template itself builds (Kimi K2 queues its tool-call ids in a `namespace(ids=[])`). What
  the template is given (messages, tools, variables) is passed as read-only copies, so it can
  still change nothing of the caller's (engine/chat/sandbox.py).
- `tojson` lists any other iterable it meets (`tools | map(attribute='function') | tojson`).
- A template that fails on decoded tool-call arguments but renders them as a JSON string
  (Functionary v3.2 concatenates them) is given them as that string, as an OpenAI client sends
  them (`json.dumps`, non-ASCII kept).
- A first system message, for a template that raises on the system role (Gemma 2), is merged
  into the first user turn: system text, "\n", user text, as llama.cpp's chat.cpp does.
- `tool_source`: a second template (a GGUF's `tokenizer.chat_template.tool_use`) that renders
  the requests that declare tools, as llama.cpp picks it.
- A template that reads `functions` or `datetime` without setting them (FireFunction v2) is
  given them as llama.cpp gives them: the tools as indented JSON, the date (without the time).

Shortcut taken on purpose: unlike transformers, an attribute the sandbox refuses (`__class__`)
fails the render instead of printing as an empty string; an inspector should say so loudly.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import jinja2
from jinja2.sandbox import SecurityError

from engine.chat import detect
from engine.chat.request import Message
from engine.chat.sandbox import ENV, Raised, freeze
from engine.parse import families
from engine.parse.families.common import FULL, skip_ws
from engine.parse.markers import CALL_CLOSE, CALL_OPEN, THINK_CLOSE, THINK_OPEN

log = logging.getLogger("prism")
# What joins a merged system message to the first user turn: llama.cpp's common/chat.cpp
# (`workaround::system_message_not_supported`) and minja's system polyfill both use one newline.
SYSTEM_JOIN = "\n"


class TemplateError(Exception):
    """A chat template could not be compiled or rendered (syntax error, sandbox refusal,
    the template's own `raise_exception`, or any error raised while rendering)."""




class ChatTemplate:
    """A compiled chat template. `render` repairs the history (see `repair_history`), then
    renders it the way transformers' `apply_chat_template(tokenize=False)` does.

    `tool_source`: the template for requests that declare tools, when the model has one apart
    (a GGUF's `tokenizer.chat_template.tool_use`: Hermes 2 Pro, Command R); llama.cpp renders
    those requests with it, and so does `render`."""

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "",
                 family: str = "auto", tool_source: str = "") -> None:
        self.source = source
        self.family = family  # whose calls history repair looks for
        self.bos_token = bos_token
        self.eos_token = eos_token
        try:
            self._template = ENV.from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"chat template syntax error at line {exc.lineno}: {exc}") from exc
        self.tool_use = (ChatTemplate(tool_source, bos_token=bos_token, eos_token=eos_token,
                                      family=family)
                         if tool_source.strip() and tool_source != source else None)

    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[dict] = (),
        add_generation_prompt: bool = True,
        enable_thinking: bool | None = None,
        extra: dict | None = None,
        continue_final: bool = False,
    ) -> str:
        """Render `messages` (repaired first) with OpenAI-shaped `tools`. `enable_thinking` is
        passed to the template only when set, so a template's own default applies otherwise;
        `extra` adds template variables (e.g. `reasoning_effort`).

        `continue_final`: the last message is an assistant turn to continue, not to close (a
        prefill: Anthropic's semantics, vLLM's `continue_final_message`). The conversation is
        rendered whole and cut right after that turn's text, as transformers does, so the
        prompt ends where the text ends (inside `<think>` when the prefill left it open). A
        final turn with no text (or only reasoning the template does not show) is dropped
        and a generation prompt added instead."""
        if tools and self.tool_use is not None:
            return self.tool_use.render(
                messages, tools=tools, add_generation_prompt=add_generation_prompt,
                enable_thinking=enable_thinking, extra=extra, continue_final=continue_final)
        variables: dict[str, Any] = {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            **(extra or {}),
        }
        if enable_thinking is not None:
            variables["enable_thinking"] = enable_thinking
        # What llama.cpp gives a template that reads these without setting them (FireFunction
        # v2's, which fails without: common_chat_params_init_firefunction_v2): `functions`, the
        # tools as indented JSON ("" for none), and `datetime`, here today's date only, so that a
        # prompt stays the same all day (and its cached prefix with it).
        if "functions" in self._reads and "functions" not in variables:
            variables["functions"] = (json.dumps([dict(t) for t in tools], indent=2,
                                                 ensure_ascii=False) if tools else "")
        if "datetime" in self._reads and "datetime" not in variables:
            variables["datetime"] = datetime.now().strftime("%b %d %Y")
        # transformers passes tools=None, not [], when a request has none (and `documents=None`
        # always): the variable is defined either way, so `tools is defined` holds and
        # `tools is not none` tells them apart, as in transformers (Llama 3.x, Mistral, Granite).
        tool_list = [dict(t) for t in tools] or None
        messages = self._merge_system(repair_history(messages, self.family))
        if not continue_final or not messages or messages[-1].role != "assistant":
            return self._render(messages, tool_list, add_generation_prompt, variables)
        final = messages[-1]
        text = final.content if final.content.strip() else (final.reasoning_content or "")
        rendered = self._render(messages, tool_list, False, variables) if text.strip() else ""
        if text.strip() and (text.strip() in rendered or final.content.strip()):
            return _cut_after(rendered, text)
        # Nothing to continue: no text, or reasoning alone that this template does not show.
        return self._render(messages[:-1], tool_list, True, variables)

    @functools.cached_property
    def _reads(self) -> frozenset[str]:
        """The variables the template reads and never sets itself (jinja's own analysis)."""
        from jinja2 import meta

        return frozenset(meta.find_undeclared_variables(ENV.parse(self.source)))

    def _render(self, messages: Sequence[Message], tools: list[dict] | None,
                add_generation_prompt: bool, variables: dict[str, Any]) -> str:
        as_string = (any(_has_object_arguments(m) for m in messages)
                     and self.string_arguments)
        if as_string:
            _log_once(self.source, "gives this chat template tool-call arguments as JSON "
                      "strings: it cannot render them decoded (Functionary v3.2 adds them to "
                      "text)")
        null = self.null_call_content and any(m.tool_calls and not m.content for m in messages)
        if null:
            _log_once(self.source, "gives this chat template a null content with tool calls "
                      "(as OpenAI clients send it): it shows calls only then")
        return self._render_dicts([_template_message(m, as_string, null) for m in messages],
                                  tools, add_generation_prompt, variables)

    def _render_dicts(self, messages: list[dict], tools: list[dict] | None,
                      add_generation_prompt: bool, variables: dict[str, Any]) -> str:
        try:
            return self._template.render(
                messages=freeze(messages),
                tools=freeze(tools),
                documents=None,
                add_generation_prompt=add_generation_prompt,
                **freeze(variables),
            )
        except SecurityError as exc:
            raise TemplateError(f"chat template tried to leave the sandbox: {exc}") from exc
        except Raised as exc:
            raise TemplateError(f"chat template refused the request: {exc}") from exc
        except jinja2.TemplateError as exc:
            raise TemplateError(f"chat template failed: {exc}") from exc
        except Exception as exc:  # a template can raise anything its expressions can (TypeError…)
            raise TemplateError(f"chat template failed: {type(exc).__name__}: {exc}") from exc

    def _probe(self, messages: list[dict], tools: list[dict] | None = None) -> str | None:
        """The template's rendering of a made-up conversation, None when it raises."""
        variables = {"bos_token": self.bos_token, "eos_token": self.eos_token}
        try:
            return self._render_dicts(messages, tools, True, variables)
        except TemplateError:
            return None

    @functools.cached_property
    def refuses_system(self) -> bool:
        """Whether the template raises on a first system message that it renders without
        (Gemma 2: "System role not supported"). Probed once."""
        user = {"role": "user", "content": "prism probe"}
        system = {"role": "system", "content": "prism probe system"}
        return self._probe([user]) is not None and self._probe([system, user]) is None

    def _merge_system(self, messages: tuple[Message, ...]) -> tuple[Message, ...]:
        """A first system message, for a template that refuses the role, merged into the first
        user turn as llama.cpp does (text, SYSTEM_JOIN, user text), else made a user turn of
        its own (minja's polyfill: the next turn is no user's, or there is none)."""
        if not messages or messages[0].role != "system" or not self.refuses_system:
            return messages
        _log_once(self.source, "merges the first system message into the first user turn: "
                  "this chat template refuses the system role")
        system, rest = messages[0], messages[1:]
        if rest and rest[0].role == "user":
            user = rest[0]
            content = system.content + (SYSTEM_JOIN + user.content if user.content else "")
            return (dataclasses.replace(user, content=content), *rest[1:])
        return (Message("user", system.content), *rest)

    @functools.cached_property
    def null_call_content(self) -> bool:
        """Whether the template shows an assistant's calls only when that turn's content is
        None, as OpenAI clients send it beside `tool_calls`, and not when it is "" as Prism
        keeps it (DeepSeek R1 Distill's templates test `content is none`). Probed once; a
        template that shows calls either way, or prints "None", keeps the empty string."""
        empty = self._probe(_call_chat("", '{"x": 1}'))
        null = self._probe(_call_chat(None, '{"x": 1}'))
        return (empty is not None and null is not None and "prism_probe_tool" not in empty
                and "prism_probe_tool" in null and "None" not in null)

    @functools.cached_property
    def string_arguments(self) -> bool:
        """Whether the template fails on tool-call arguments given decoded (a dict, as Prism
        keeps them) but renders them given as the JSON string OpenAI clients send: Functionary
        v3.2 writes `'\n' + arguments`. Probed once."""
        content = None if self.null_call_content else ""
        tools = [{"type": "function", "function": {
            "name": "prism_probe_tool", "description": "probe",
            "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}]
        as_text = json.dumps({"x": 1})
        if self._probe(_call_chat(content, {"x": 1}), tools) is not None:
            return False
        rendered = self._probe(_call_chat(content, as_text), tools)
        return rendered is not None and as_text in rendered

    @functools.cached_property
    def renders_tools(self) -> bool:
        """Whether the template shows a request's tools to the model at all. ChatML as most
        GGUFs carry it never renders `tools`: the model then cannot call anything, and nothing
        says why (issue 9, item 4). Probed once, with one made-up tool."""
        chat = (Message("user", "?"),)
        probe = ({"type": "function", "function": {
            "name": "prism_probe_tool", "description": "probe",
            "parameters": {"type": "object", "properties": {}}}},)
        try:
            return "prism_probe_tool" in self.render(chat, tools=probe)
        except TemplateError:
            return True  # a template that cannot render this probe: do not claim anything


_LOGGED: set[tuple[str, str]] = set()


def _log_once(source: str, what: str) -> None:
    """An INFO line, once per template text and adaptation, however many renders need it."""
    key = (hashlib.sha256(source.encode()).hexdigest(), what)
    if key not in _LOGGED:
        _LOGGED.add(key)
        log.info("[prism] Prism %s", what)


def _call_chat(content: str | None, arguments: Any) -> list[dict]:
    """A made-up conversation for a template's probes: a question, an assistant turn with
    `content` calling `prism_probe_tool` with `arguments`, the tool's result."""
    call = {"id": "call_prism_probe", "type": "function",
            "function": {"name": "prism_probe_tool", "arguments": arguments}}
    return [{"role": "user", "content": "prism probe"},
            {"role": "assistant", "content": content, "tool_calls": [call]},
            {"role": "tool", "content": "prism probe result",
             "tool_call_id": "call_prism_probe", "name": "prism_probe_tool"}]


def _has_object_arguments(message: Message) -> bool:
    return any(isinstance((c.get("function") or {}).get("arguments"), dict)
               for c in message.tool_calls)


def _cut_after(rendered: str, text: str) -> str:
    """The rendered prompt cut right after the final turn's `text` (templates may strip its
    leading or trailing whitespace, so the stripped text is looked for, last occurrence)."""
    at = rendered.rfind(text.strip())
    if at < 0:
        raise TemplateError("chat template does not render the final assistant message's "
                            "text, so it cannot be continued")
    body = text.lstrip()
    if rendered.startswith(body, at):  # the template kept its trailing whitespace: keep it too
        return rendered[: at + len(body)]
    return rendered[: at + len(text.strip())]


def _template_message(message: Message, string_arguments: bool = False,
                      null_call_content: bool = False) -> dict[str, Any]:
    d = message.to_template()
    if string_arguments and message.tool_calls:
        d["tool_calls"] = [_string_call(c) for c in d["tool_calls"]]
    if null_call_content and message.tool_calls and not message.content:
        d["content"] = None
    if message.reasoning_content is not None:
        # transformers (5.x) also offers the reasoning as `thinking`, the name gpt-oss reads.
        d = {"thinking": message.reasoning_content, **d}
    return d


def _string_call(call: dict) -> dict:
    """A tool call with its decoded arguments written back as the JSON text an OpenAI client
    sends (`json.dumps`, non-ASCII kept); calls whose arguments are text already are kept."""
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("arguments"), dict):
        return call
    text = json.dumps(function["arguments"], ensure_ascii=False)
    return {**call, "function": {**function, "arguments": text}}


# --- history repair -------------------------------------------------------------------------
# A model sometimes writes a complete tool call inside its thinking without `</think>` first
# (tests/fixtures/recorded_tool_call_in_thinking.json holds four real cases). If that turn
# comes back in the history as is, the model is shown, as an example, a call inside `<think>`.
# The repair closes the thinking right before the call. The shipped Qwen3 templates do the same
# in jinja (with the same string operations, so GGUF users of the template get it too); both
# must agree, and applying it twice changes nothing.


def _is_opener(after_tag: str) -> bool:
    """After `<tool_call>` and optional whitespace: a family's opener (`<function=` for Qwen
    XML, `{"name"` for Hermes JSON), decided by the families themselves, as the parser does."""
    j = skip_ws(after_tag, 0)
    return j >= 0 and families.opener_family("auto", after_tag, j)[0] == FULL


def find_call_start(reasoning: str) -> int:
    """Offset of the first real call in reasoning text, or -1: a `<tool_call>` at the start of
    a line (or of the text), outside ``` / ~~~ fences, followed by an opener."""
    fence = ""
    offset = 0
    for line in reasoning.split("\n"):
        marker = line.lstrip()[:3]
        if fence:
            if marker == fence:
                fence = ""
        elif marker in ("```", "~~~"):
            fence = marker
        elif line.startswith(CALL_OPEN) and _is_opener(reasoning[offset + len(CALL_OPEN) :]):
            return offset
        offset += len(line) + 1
    return -1


def _repair_content(content: str) -> str | None:
    """Form (a): content opens `<think>`, never closes it, and holds a call."""
    if not content.lstrip().startswith(THINK_OPEN) or THINK_CLOSE in content:
        return None
    body_at = content.find(THINK_OPEN) + len(THINK_OPEN)
    cut = find_call_start(content[body_at:])
    if cut == -1:
        return None
    cut += body_at
    return content[:cut] + THINK_CLOSE + "\n\n" + content[cut:]


def _repair_reasoning(message: Message) -> Message | None:
    """Form (b): no tool_calls, and reasoning_content ends with a call."""
    reasoning = message.reasoning_content
    if message.tool_calls or not reasoning:
        return None
    if not reasoning.rstrip().endswith(CALL_CLOSE):  # cheap test first: most turns stop here
        return None
    cut = find_call_start(reasoning)
    if cut == -1:
        return None
    call = reasoning[cut:].rstrip()
    content = message.content
    if content.strip():
        call += "\n" + content.lstrip("\n")
    return dataclasses.replace(
        message, reasoning_content=reasoning[:cut].rstrip("\n"), content=call
    )


def repair_message(message: Message) -> Message:
    """One turn repaired (or returned unchanged: non-assistant turns, healthy turns)."""
    if message.role != "assistant":
        return message
    fixed = _repair_reasoning(message)
    if fixed is not None:
        return fixed
    content = _repair_content(message.content)
    return message if content is None else dataclasses.replace(message, content=content)


def repair_history(messages: Iterable[Message], family: str = "auto") -> tuple[Message, ...]:
    """Every assistant turn whose thinking swallowed a tool call, closed before the call. The
    model families other than Qwen / Hermes (`family`) are repaired by engine/chat/detect.py,
    with their own markers."""
    fam = families.get(family)
    if fam is not None and not fam.fallback:
        return tuple(detect.repair_message(m, family) for m in messages)
    return tuple(repair_message(m) for m in messages)
