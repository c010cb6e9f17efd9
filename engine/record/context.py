"""Where a prompt's context went: its tokens by part, and a token-aligned diff of two prompts.

Owns `Part`, `Breakdown`, `breakdown` (a rendered prompt cut into the system prompt, each tool's
schema, each message, the tool calls and tool results in the history, replayed reasoning, and
the template's own scaffolding, each counted in tokens by the model's tokenizer),
`messages_from` (a live request's or a recorded request dict's messages, tool calls kept) and
`prompt_diff` (two prompts' tokens aligned, for turn N against turn N+1). Pure work on the
caller's thread: the GUI thread for the prompt view, the main thread for `prism stats
--context`. It takes the tokenizer as a function, so it needs no model of its own.

Why: an agent's context fills up and nobody can say with what. Proxies estimate with characters
divided by four; Prism has the rendered prompt and the tokenizer, so each part is counted in
real tokens.

How the parts are found:
- Message texts (content, replayed reasoning) by `forensics.message_spans`: exact with the
  template's marker render, else by searching each text after the previous one.
- Tool calls in the history: what the template wrote between an assistant turn's last text
  and the next turn's first text, when that turn made calls (the template re-serialises the
  arguments, so searching for them would miss).
- Tool schemas: with the template (`render_tools(tools)` renders the request with the first k
  tools), each tool's text is what adding it inserted; without one, each tool is counted as its
  JSON, and marked as not located in the prompt.
- Scaffolding: every character no part claims (role markers, the generation prompt).
Each part's tokens are its text tokenized alone; the scaffolding gets the rest of the prompt's
real total, so the parts add up to the count the engine saw (a tool counted as its JSON is
taken out of the scaffolding, which then holds the template's own text around it).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.chat.request import ChatRequest, Message
from engine.record import forensics
from engine.record.recording import request_from_dict

KINDS = ("system", "tools", "user", "assistant", "tool_calls", "tool_results", "reasoning",
         "scaffolding")

Tokenize = Callable[[str], Sequence[int]]


@dataclass(frozen=True, slots=True)
class Part:
    """One part of a prompt. `start`/`end` are char offsets in the prompt (-1 when the part was
    not located in it: a tool's schema counted as JSON without the template)."""

    kind: str  # one of KINDS
    label: str  # "message 3 (user)", "tool get_weather", "template"
    tokens: int
    start: int = -1
    end: int = -1
    unused: bool = False  # a tool declared but never called in the conversation

    @property
    def located(self) -> bool:
        return self.start >= 0


@dataclass(frozen=True, slots=True)
class Breakdown:
    total: int  # the whole prompt's tokens
    parts: tuple[Part, ...]

    def by_kind(self) -> dict[str, int]:
        out = dict.fromkeys(KINDS, 0)
        for p in self.parts:
            out[p.kind] += p.tokens
        return out

    def unused_tools(self) -> tuple[str, ...]:
        return tuple(p.label.removeprefix("tool ") for p in self.parts if p.unused)


def messages_from(request: ChatRequest | dict | None) -> tuple[Message, ...]:
    """The messages of a live request or of a recorded request dict, tool calls kept."""
    if request is None:
        return ()
    if isinstance(request, ChatRequest):
        return request.messages
    out = []
    for m in request.get("messages") or ():
        if not isinstance(m, dict):
            continue
        calls = tuple(c for c in m.get("tool_calls") or () if isinstance(c, dict))
        out.append(Message(role=str(m.get("role", "")), content=str(m.get("content") or ""),
                           reasoning_content=m.get("reasoning_content") or None,
                           tool_calls=calls, tool_call_id=m.get("tool_call_id"),
                           name=m.get("name")))
    return tuple(out)


def tools_from(request: ChatRequest | dict | None) -> tuple[dict, ...]:
    if request is None:
        return ()
    tools = request.tools if isinstance(request, ChatRequest) else request.get("tools") or ()
    return tuple(t for t in tools if isinstance(t, dict))


def _tool_name(tool: dict) -> str:
    fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    return str(fn.get("name", "")) if isinstance(fn, dict) else ""


def _called(messages: Sequence[Message]) -> set[str]:
    names = set()
    for m in messages:
        for c in m.tool_calls:
            fn = c.get("function") if isinstance(c.get("function"), dict) else c
            names.add(str(fn.get("name", "")))
    return names


def _count(tokenize: Tokenize, text: str, overhead: int) -> int:
    return max(len(tokenize(text)) - overhead, 0) if text else 0


def _insertion(short: str, long: str) -> tuple[int, int] | None:
    """Where `long` is `short` with one run of text inserted: that run's (start, end) in
    `long`; None when the two differ otherwise."""
    grown = len(long) - len(short)
    if grown <= 0:
        return None
    head = 0
    while head < len(short) and short[head] == long[head]:
        head += 1
    tail = 0  # the common suffix may not reach into the common prefix
    while tail < len(short) - head and short[-1 - tail] == long[-1 - tail]:
        tail += 1
    return (head, head + grown) if head + tail == len(short) else None


def _aligned(prompt: str, a: int, b: int, floor: int) -> tuple[int, int]:
    """A removed run between repeated blocks can be placed several ways ("name</x><x><name>"
    is the same deletion as "<x><name>name</x>"): slide it left, not before `floor` (the end
    of the previous tool's span), and take the leftmost place that starts a line (else the
    leftmost), so the tools' spans tile the section block by block."""
    places = [(a, b)]
    while a > floor and prompt[a - 1] == prompt[b - 1]:
        a, b = a - 1, b - 1
        places.append((a, b))
    lines = [p for p in places if p[0] == 0 or prompt[p[0] - 1] == "\n"]
    return min(lines or places)


_PROBE = {"type": "function", "function": {"name": "prism_context_probe", "description": "",
                                           "parameters": {"type": "object", "properties": {}}}}


def _tool_spans(prompt: str, tools: Sequence[dict],
                render_tools: Callable[[Sequence[dict]], str]
                ) -> tuple[list[tuple[int, int]], tuple[int, int]] | None:
    """Each tool's own (start, end) in `prompt` (what leaving it out removes), and the whole
    tools section's (what leaving them all out removes: the tools and the template's
    instructions around them). None when the template does not render tools as one block of
    one insertion per tool, or the render is not the prompt."""
    try:
        if render_tools(tools) != prompt:
            return None
        section = _insertion(render_tools(()), prompt)
        if section is None:
            return None
        spans = []
        for k in range(len(tools)):
            if len(tools) > 1:
                span = _insertion(render_tools(tools[:k] + tools[k + 1:]), prompt)
            else:  # leaving the only tool out drops the section too: find its text by a probe
                two = render_tools((*tools, _PROBE))
                own = _insertion(render_tools((_PROBE,)), two)
                at = prompt.find(two[own[0]:own[1]]) if own is not None else -1
                span = (at, at + own[1] - own[0]) if own is not None and at >= 0 else None
            if span is None:
                return None
            spans.append(_aligned(prompt, *span, spans[-1][1] if spans else section[0]))
    except Exception:  # a template that refuses a subset of the tools: count them as JSON
        return None
    return spans, section


def _role_kind(role: str) -> str:
    return {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
            "tool": "tool_results", "ipython": "tool_results", "function": "tool_results"
            }.get(role, "user")


def breakdown(prompt: str, messages: Sequence[Message], tools: Sequence[dict],
              tokenize: Tokenize, *,
              render: Callable[[tuple[Message, ...]], str] | None = None,
              render_tools: Callable[[Sequence[dict]], str] | None = None) -> Breakdown:
    """`prompt`'s tokens by part (see the module docstring). `tokenize` is the model's (a BOS
    it adds is counted once, in the total and the scaffolding); `render` renders messages with
    the request's template and `render_tools` the request with a subset of its tools, both
    optional."""
    overhead = len(tokenize(""))
    total = len(tokenize(prompt))
    called = _called(messages)
    parts: list[Part] = []
    claimed: list[tuple[int, int]] = []

    found = _tool_spans(prompt, tools, render_tools) if tools and render_tools else None
    for k, tool in enumerate(tools):
        name = _tool_name(tool)
        if found is not None:
            a, b = found[0][k]
            n = _count(tokenize, prompt[a:b], overhead)
            claimed.append((a, b))
        else:
            a = b = -1
            n = _count(tokenize, json.dumps(tool, ensure_ascii=False), overhead)
        parts.append(Part("tools", f"tool {name}", n, a, b, unused=name not in called))
    instructions = 0
    if found is not None:
        # The template's own text around the schemas: scaffolding, but worth its own line.
        a, b = found[1]
        instructions = max(_count(tokenize, prompt[a:b], overhead)
                           - sum(p.tokens for p in parts), 0)
        parts.append(Part("scaffolding", "tool instructions", instructions))
        claimed.append((a, b))

    spans = forensics.message_spans(prompt, messages, render)
    starts = [min((s for _, s, _ in own), default=-1) for own in spans]
    for i, (m, own) in enumerate(zip(messages, spans, strict=True)):
        role = f"message {i} ({m.role})"
        for field, a, b in own:
            if any(a < ce and cs < b for cs, ce in claimed):
                continue  # inside a tool's schema (a system prompt the template put there)
            kind = "reasoning" if field == "reasoning" else _role_kind(m.role)
            label = f"{role} reasoning" if field == "reasoning" else role
            parts.append(Part(kind, label, _count(tokenize, prompt[a:b], overhead), a, b))
            claimed.append((a, b))
        if m.tool_calls:
            # From this turn's last text (or the last claim before the next turn) to the next
            # turn's first text: what the template wrote for the calls.
            b = next((s for s in starts[i + 1:] if s >= 0), len(prompt))
            a = max((e for _, _, e in own), default=-1)
            if a < 0:
                a = max((e for _, e in claimed if e <= b), default=0)
            if b > a:
                names = ", ".join(_tool_name(c) for c in m.tool_calls)
                parts.append(Part("tool_calls", f"{role} calls {names}",
                                  _count(tokenize, prompt[a:b], overhead), a, b))
                claimed.append((a, b))

    # A tool counted as its JSON stands in for text the scaffolding would otherwise hold.
    counted = sum(p.tokens for p in parts if p.located or p.kind == "tools") + instructions
    parts.append(Part("scaffolding", "template", max(total - counted, 0)))
    parts.sort(key=lambda p: (not p.located, p.start))
    return Breakdown(total, tuple(parts))


def of_request(prompt: str, request: ChatRequest | dict | None, tokenize: Tokenize,
               render_request: Callable[[ChatRequest], str] | None = None) -> Breakdown:
    """`breakdown` of a live request or a recorded request dict. `render_request` is the
    service's render (the pack's template with the request's settings); with it the messages
    are found exactly and the tools located, when the recorded request still renders to the
    recorded prompt."""
    messages, tools = messages_from(request), tools_from(request)
    render = render_tools = None
    if render_request is not None and request is not None:
        try:
            live = request if isinstance(request, ChatRequest) else request_from_dict(request)
        except (TypeError, ValueError):  # a dict from an older or foreign recording
            live = None
        if live is not None:
            def render(msgs: tuple[Message, ...]) -> str:
                return render_request(dataclasses.replace(live, messages=msgs))

            def render_tools(subset: Sequence[dict]) -> str:
                return render_request(dataclasses.replace(live, tools=tuple(subset)))
    return breakdown(prompt, messages, tools, tokenize, render=render, render_tools=render_tools)


@dataclass(frozen=True, slots=True)
class DiffOp:
    """One step of a token-aligned diff: `tag` is difflib's (equal, replace, delete, insert);
    the token ranges are [a0, a1) in the first prompt and [b0, b1) in the second."""

    tag: str
    a0: int
    a1: int
    b0: int
    b1: int


@dataclass(frozen=True, slots=True)
class PromptDiff:
    a: tuple[int, ...]
    b: tuple[int, ...]
    ops: tuple[DiffOp, ...]

    @property
    def common_prefix(self) -> int:
        """Tokens the two prompts share from the start: what a prefix cache can reuse."""
        first = self.ops[0] if self.ops else None
        return first.a1 - first.a0 if first is not None and first.tag == "equal" else 0

    @property
    def changed(self) -> tuple[DiffOp, ...]:
        return tuple(op for op in self.ops if op.tag != "equal")


def prompt_diff(a: str, b: str, tokenize: Tokenize) -> PromptDiff:
    """The two prompts' tokens aligned. The shared head and tail are taken first (what a prefix
    cache sees: difflib alone may place an appended turn inside a repeated role marker), then
    difflib aligns the middle, with no junk heuristic (a prompt's frequent tokens are exactly
    what must align)."""
    ta, tb = tuple(tokenize(a)), tuple(tokenize(b))
    head = 0
    while head < min(len(ta), len(tb)) and ta[head] == tb[head]:
        head += 1
    tail = 0
    while tail < min(len(ta), len(tb)) - head and ta[-1 - tail] == tb[-1 - tail]:
        tail += 1
    ops = [DiffOp("equal", 0, head, 0, head)] if head else []
    matcher = difflib.SequenceMatcher(None, ta[head:len(ta) - tail], tb[head:len(tb) - tail],
                                      autojunk=False)
    ops += [DiffOp(tag, a0 + head, a1 + head, b0 + head, b1 + head)
            for tag, a0, a1, b0, b1 in matcher.get_opcodes()]
    if tail:
        ops.append(DiffOp("equal", len(ta) - tail, len(ta), len(tb) - tail, len(tb)))
    return PromptDiff(ta, tb, tuple(ops))
