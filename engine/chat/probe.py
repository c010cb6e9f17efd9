"""The template probe: a chat template's renders of made-up conversations → its call syntax.

Owns `Probe` (what the renders showed: the call texts, the derived `CallFormat` record and the
reasoning markers, or why none could be derived), `Render` (one probe render, kept for
`prism probe`) and `probe(template)`. The template is rendered in Prism's sandbox
(engine/chat/template.py `ChatTemplate`) with probe conversations: an assistant turn without
calls against one with a call, one call against two, two function names, one argument against
two, a string against a number, reasoning in the history or not, thinking on and off (the
tools described in full where the plain ones are refused; a template that renders only the
first of two calls is derived from its one-call renders). The renders are diffed: the
assistant's call text is what a call adds to the turn, and its markers (section, call,
parameter tags) are what stays the same around what changes (names, keys, values;
engine/chat/probe_diff.py `derive`). The shape is the call syntax the template shows (a
Python-call list, a JSON list, a JSON object in a wrapper, a name in markers and JSON arguments,
tagged key/value), never its header tokens. Whether the record reads
the template's own calls back is decided next door (engine/chat/probe_check.py). Pure: no
I/O; called at startup, by `prism probe` and by tests, on their thread; results are cached by
template text.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

from engine.chat.probe_diff import (
    ALPHA,
    BETA,
    KA,
    KB,
    KC,
    NUM,
    V1,
    V2,
    call_id,
    common_prefix,
    common_suffix,
    derive,
)
from engine.chat.request import Message
from engine.chat.template import ChatTemplate, TemplateError
from engine.parse.shapes.record import CallFormat

TEXT, THOUGHT = "PRISM-TEXT.", "PRISM-THOUGHT"
TOOLS = (
    {"type": "function", "function": {
        "name": ALPHA, "description": "probe", "parameters": {"type": "object", "properties": {
            KA: {"type": "string"}, KB: {"type": "integer"}}}}},
    {"type": "function", "function": {
        "name": BETA, "description": "probe", "parameters": {"type": "object", "properties": {
            KC: {"type": "string"}}}}},
)
# The same tools as clients spell them in full, every property described and the required ones
# listed (Command R+'s template reads `param_fields.description` and `tool.parameters.required`),
# tried when the plain ones are refused.
_FULL_TOOLS = tuple(
    {"type": "function", "function": {
        **t["function"], "parameters": {
            "type": "object", "required": list(t["function"]["parameters"]["properties"]),
            "properties": {k: {**v, "description": "probe"} for k, v in
                           t["function"]["parameters"]["properties"].items()}}}}
    for t in TOOLS)
# The calls each probe conversation's assistant writes: (label, ((name, arguments), ...)).
CALLS = (
    ("one call, one string argument", ((ALPHA, {KA: V1}),)),
    ("one call, a string and a number", ((ALPHA, {KA: V1, KB: NUM}),)),
    ("two calls, two names", ((ALPHA, {KA: V1}), (BETA, {KC: V2}))),
)
NO_CALLS = "the template renders no tool calls"
_TAG_END = re.compile(r"(<[^<>\n]*>|\[[A-Z_]+\]|<[｜|][^<>\n]*[｜|]>)\s*$")
_TAG_START = re.compile(r"^\s*(<[^<>\n]*>|\[[A-Z_]+\])")


@dataclass(frozen=True, slots=True)
class Render:
    """One probe render: what was asked (`label`) and the part of the render it showed
    (`text`: the assistant's call text, or the whole render where that is the point)."""

    label: str
    text: str


@dataclass(frozen=True, slots=True)
class Probe:
    """What a template's renders showed.

    format: the derived call syntax (None: none could be derived, `why` says why).
    reasoning: (opener, closer) of reasoning as the template writes it in the history, or as
        its generation prompt opens it with thinking on; None when it shows none.
    calls: the probe calls, with the call text the template rendered for each (label, calls,
        text): what the self-test reads back.
    renders: every probe render, for people (`prism probe`).
    why: "" when a format was derived, else why not (NO_CALLS when no call was rendered).
    opens_reasoning: the generation prompt with thinking on ends inside the reasoning.
    """

    format: CallFormat | None
    reasoning: tuple[str, str] | None = None
    calls: tuple[tuple[str, tuple, str], ...] = ()
    renders: tuple[Render, ...] = ()
    why: str = ""
    opens_reasoning: bool = False

    @property
    def no_calls(self) -> bool:
        return self.why == NO_CALLS


def _call(i: int, name: str, args: dict) -> dict:
    return {"id": call_id(i), "type": "function",
            "function": {"name": name, "arguments": args}}


def _turn(calls=(), content: str = "", reasoning: str | None = None) -> tuple[Message, ...]:
    tool_calls = tuple(_call(i, n, a) for i, (n, a) in enumerate(calls))
    return (Message("user", "PRISM-QUESTION"),
            Message("assistant", content, reasoning_content=reasoning, tool_calls=tool_calls))


@functools.lru_cache(maxsize=128)
def probe(source: str, tool_source: str = "") -> Probe:
    """The call syntax `source` shows when it renders an assistant's calls (`tool_source`: a
    GGUF's tool_use template, which renders the requests with tools)."""
    try:
        tpl = ChatTemplate(source, tool_source=tool_source)
    except TemplateError as exc:
        return Probe(None, why=f"the template does not compile: {exc}")
    for tools in (TOOLS, _FULL_TOOLS, ()):
        try:
            return _probe(tpl, tools)
        except TemplateError as exc:
            failed = str(exc)
    return Probe(None, why=f"the template refuses the probe conversations: {failed}")


def _render(tpl: ChatTemplate, messages, tools, **kw) -> str:
    return tpl.render(messages, tools=tools, add_generation_prompt=False, **kw)


def _region(full: str, text: str, head: str, end: str) -> str:
    """The call text of render `full`: what stands where the answer `text` rendered holds its
    answer (between `head` and `end`); else what differs from that render, from the tag it
    starts in (a common prefix may end inside a tag both spell alike: `<|START_`)."""
    if full.startswith(head) and full.endswith(end) and len(full) >= len(head) + len(end):
        return full[len(head):len(full) - len(end)]
    p = common_prefix(full, text)
    opened = max(full.rfind("<", 0, p), full.rfind("[", 0, p))
    if opened > max(full.rfind(">", 0, p), full.rfind("]", 0, p)):
        p = opened
    e = len(full) - min(common_suffix(full, text), len(full) - p)
    # Nor does it end inside a tag both end alike (`<|eom_id|>` against `<|eot_id|>`); a tag
    # whose name only ends like the other's punctuation (`<|END_ACTION|>` against
    # `<|END_RESPONSE|>`: `|>`) is the call text's own.
    opened, closed = full.rfind("<", p, e), full.find(">", e)
    if opened > full.rfind(">", p, e) and closed >= 0:
        e = opened if re.search(r"\w", full[e:closed]) else closed + 1
    return full[p:e]


def _untail(region: str, end: str) -> str:
    """`region` without the end-of-turn tags the answer's turn ends with too (a template may
    end a turn of calls without the whitespace it ends an answer with)."""
    while (m := _TAG_END.search(region)) and m.start() > 0 and m.group(1) in end:
        region = region[:m.start()]
    # A turn's end may come before more tags of its own (`<｜end▁of▁sentence｜><｜Assistant｜>`):
    # in the run of tags the region ends with, the first that ends an answer's turn too.
    tags, cut = region, len(region)
    while (m := _TAG_END.search(tags)) and m.start() > 0:
        if m.group(1) in end:
            cut = m.start()
        tags = tags[:m.start()]
    return region[:cut]


def _probe(tpl: ChatTemplate, tools) -> Probe:
    text = _render(tpl, _turn(content=TEXT), tools)
    at = text.find(TEXT)
    if at < 0:
        return Probe(None, renders=(Render("no calls, an answer", text),),
                     why="the template does not render an assistant's answer")
    head, end = text[:at], text[at + len(TEXT):]
    try:  # Ministral refuses an assistant turn with neither content nor calls
        bare = _render(tpl, _turn(), tools)
        bare = bare[common_prefix(bare, text):]
    except TemplateError as exc:
        bare = f"(refused: {exc})"
    renders = [Render("no calls, empty answer", bare), Render("no calls, an answer", text[at:])]
    try:  # the answer's turn as a next turn follows it: its end-of-turn tags, for _untail
        follow = _render(tpl, (*_turn(content=TEXT), Message("user", "PRISM-NEXT")), tools)
        end += follow[follow.find(TEXT) + len(TEXT):follow.find("PRISM-NEXT")]
    except TemplateError:
        pass
    rendered = []
    for label, calls in CALLS:
        try:
            full = _render(tpl, _turn(calls), tools)
        except TemplateError as exc:  # Llama 3.1 refuses two calls in one turn
            renders.append(Render(label, f"(refused: {exc})"))
            rendered.append((label, calls, ""))
            continue
        region = _untail(_region(full, text, head, text[at + len(TEXT):]), end)
        renders.append(Render(label, region))
        rendered.append((label, calls, region.strip()))
    reasoning, opens = _reasoning(tpl, tools, len(head), renders)
    if reasoning is None and (pair := _call_reasoning(tpl, tools, renders)) is not None:
        # The template writes reasoning only before calls (Command R7B's tool plan), and an
        # empty pair where there is none: the model's reasoning, not the call text.
        empty = re.compile(r"\s*" + re.escape(pair[0]) + r"\s*" + re.escape(pair[1]) + r"\s*")
        if all(empty.match(t) for _, _, t in rendered if t):
            reasoning = pair
            rendered = [(lb, c, t[empty.match(t).end():] if t else t) for lb, c, t in rendered]
    if rendered[2][2] and rendered[2][2] == rendered[0][2]:
        # Two calls rendered as the first alone (GigaChat 3 writes `tool_calls[0]`): the
        # template shows one call a turn; that render is no two calls to read back.
        renders[4] = Render(renders[4].label, renders[4].text + "\n(the first call only: the "
                            "template renders one call a turn)")
        rendered[2] = (rendered[2][0], rendered[2][1], "")
    base = Probe(None, reasoning, tuple(rendered), tuple(renders), opens_reasoning=opens)
    one = rendered[0][2]
    if renders[2].text.startswith("(refused"):
        return replace(base, why=f"the template refuses a call in the history: {renders[2].text}")
    if ALPHA not in one or V1 not in one:
        return replace(base, why=NO_CALLS)
    try:
        fmt = derive(one, rendered[1][2], rendered[2][2])
    except ValueError as exc:
        return replace(base, why=str(exc))
    return replace(base, format=fmt)


def _call_reasoning(tpl: ChatTemplate, tools, renders: list[Render]):
    """(opener, closer) of reasoning as the template writes it before a call, or None."""
    try:
        shown = _render(tpl, _turn(CALLS[0][1], reasoning=THOUGHT), tools)
    except TemplateError:
        return None
    at = shown.find(THOUGHT)
    if at < 0:
        return None
    opener = _TAG_END.search(shown[:at])
    closer = _TAG_START.search(shown[at + len(THOUGHT):])
    if not (opener and closer):
        return None
    start = shown.rfind(ALPHA)
    renders.append(Render("a call after reasoning", shown[opener.start():start + len(ALPHA)]))
    return opener.group(1), closer.group(1)


def _reasoning(tpl: ChatTemplate, tools, head: int, renders: list[Render]):
    """(opener, closer) of reasoning from a history turn that has some, else from the prompt
    that thinking on opens; and whether that prompt ends inside it."""
    pair = None
    try:
        shown = _render(tpl, _turn(content=TEXT, reasoning=THOUGHT), tools)
    except TemplateError:
        shown = ""
    at = shown.find(THOUGHT)
    if at >= 0:
        renders.append(Render("an answer after reasoning", shown[head:]))
        before, after = shown[head:at], shown[at + len(THOUGHT):shown.find(TEXT, at)]
        opener, closer = _TAG_END.search(before), _TAG_START.search(after)
        if opener and closer:
            pair = (opener.group(1), closer.group(1))
    opens = False
    try:
        on = tpl.render((Message("user", "PRISM-QUESTION"),), tools=tools, enable_thinking=True)
        off = tpl.render((Message("user", "PRISM-QUESTION"),), tools=tools,
                         enable_thinking=False)
    except TemplateError:
        return pair, opens
    cut = common_prefix(on, off)
    renders.append(Render("generation prompt, thinking on", on[cut:]))
    renders.append(Render("generation prompt, thinking off", off[cut:]))
    last = _TAG_END.search(on.rstrip())
    if last and (pair is None or last.group(1) == pair[0]) and on != off:
        tag = last.group(1)
        # A closer is guessed for a named tag only (`<think>`), never a special token's.
        if pair is None and re.fullmatch(r"<[A-Za-z][\w-]*>", tag):
            pair = (tag, "</" + tag[1:])
        opens = pair is not None and tag == pair[0]
    return pair, opens


__all__ = ["CALLS", "NO_CALLS", "TOOLS", "Probe", "Render", "derive", "probe"]
