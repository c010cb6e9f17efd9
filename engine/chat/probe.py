"""The template probe: a chat template's renders of made-up conversations → its call syntax.

Owns `Probe` (what the renders showed: the call texts, the derived `CallFormat` record and the
reasoning markers, or why none could be derived), `Render` (one probe render, kept for
`prism probe`) and `probe(template)`. The template is rendered in Prism's sandbox
(engine/chat/template.py `ChatTemplate`) with probe conversations: an assistant turn without
calls against one with a call, one call against two, two function names, one argument against
two, a string against a number, reasoning in the history or not, thinking on and off. The
renders are diffed: the assistant's call text is what a call adds to the turn, and its markers
(section, call, parameter tags) are what stays the same around what changes (names, keys,
values). The shape is the call syntax the template shows (a Python-call list, a JSON list, a
JSON object in a wrapper, tagged key/value), never its header tokens. Whether the record reads
the template's own calls back is decided next door (engine/chat/probe_check.py). Pure: no
I/O; called at startup, by `prism probe` and by tests, on their thread; results are cached by
template text.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, replace

from engine.chat.request import Message
from engine.chat.template import ChatTemplate, TemplateError
from engine.parse.shapes.record import (
    JSON_LIST,
    JSON_OBJECT,
    NAME_JSON,
    PYTHON_LIST,
    TAGGED,
    CallFormat,
)

# Probe names, keys and values: distinctive enough never to be part of a template's own text.
ALPHA, BETA = "prism_alpha", "prism_beta"
KA, KB, KC = "prism_ka", "prism_kb", "prism_kc"
V1, V2, NUM = "PRISM-V1", "PRISM-V2", 7
TEXT, THOUGHT = "PRISM-TEXT.", "PRISM-THOUGHT"
TOOLS = (
    {"type": "function", "function": {
        "name": ALPHA, "description": "probe", "parameters": {"type": "object", "properties": {
            KA: {"type": "string"}, KB: {"type": "integer"}}}}},
    {"type": "function", "function": {
        "name": BETA, "description": "probe", "parameters": {"type": "object", "properties": {
            KC: {"type": "string"}}}}},
)
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
    return {"id": f"prismc{i:03d}", "type": "function",
            "function": {"name": name, "arguments": args}}


def _turn(calls=(), content: str = "", reasoning: str | None = None) -> tuple[Message, ...]:
    tool_calls = tuple(_call(i, n, a) for i, (n, a) in enumerate(calls))
    return (Message("user", "PRISM-QUESTION"),
            Message("assistant", content, reasoning_content=reasoning, tool_calls=tool_calls))


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _common_suffix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[-1 - i] == b[-1 - i]:
        i += 1
    return i


def _at_tag(s: str) -> str:
    """`s` from its first `<` or `[` on (a marker starts at a tag, not inside the one
    before it: `>\\n<parameter=` is `<parameter=`); `s` when it has none."""
    at = min((i for i in (s.find("<"), s.find("[")) if i >= 0), default=-1)
    return s[at:] if at > 0 else s


@functools.lru_cache(maxsize=128)
def probe(source: str, tool_source: str = "") -> Probe:
    """The call syntax `source` shows when it renders an assistant's calls (`tool_source`: a
    GGUF's tool_use template, which renders the requests with tools)."""
    try:
        tpl = ChatTemplate(source, tool_source=tool_source)
    except TemplateError as exc:
        return Probe(None, why=f"the template does not compile: {exc}")
    for tools in (TOOLS, ()):
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
    p = _common_prefix(full, text)
    opened = max(full.rfind("<", 0, p), full.rfind("[", 0, p))
    if opened > max(full.rfind(">", 0, p), full.rfind("]", 0, p)):
        p = opened
    e = len(full) - min(_common_suffix(full, text), len(full) - p)
    # Nor does it end inside a tag both end alike (`<|eom_id|>` against `<|eot_id|>`).
    opened = full.rfind("<", p, e)
    if opened > full.rfind(">", p, e) and full.find(">", e) >= 0:
        e = opened
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
    bare = _render(tpl, _turn(), tools)
    text = _render(tpl, _turn(content=TEXT), tools)
    at = text.find(TEXT)
    if at < 0:
        return Probe(None, renders=(Render("no calls, an answer", text),),
                     why="the template does not render an assistant's answer")
    head, end = text[:at], text[at + len(TEXT):]
    renders = [Render("no calls, empty answer", bare[_common_prefix(bare, text):]),
               Render("no calls, an answer", text[at:])]
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
    cut = _common_prefix(on, off)
    renders.append(Render("generation prompt, thinking on", on[cut:]))
    renders.append(Render("generation prompt, thinking off", off[cut:]))
    last = _TAG_END.search(on.rstrip())
    if last and (pair is None or last.group(1) == pair[0]) and on != off:
        tag = last.group(1)
        if pair is None and tag.startswith("<") and not tag.startswith("</"):
            pair = (tag, "</" + tag[1:])
        opens = pair is not None and tag == pair[0]
    return pair, opens


# --- from call texts to a record -------------------------------------------------------------


def derive(one: str, two_args: str, two_calls: str) -> CallFormat:
    """The record of the call texts of one call with one argument (`one`), one call with two
    (`two_args`) and two calls (`two_calls`); ValueError (why) when they fit no shape."""
    py = re.search(r"\[\s*" + ALPHA + r"\(", one)
    if py:
        return _python(one, two_calls, py.start())
    found = _json_at(one)
    if found is not None:
        return _json(one, two_calls, *found)
    for args in (json.dumps({KA: V1}), f'{{"{KA}":"{V1}"}}'):
        if args in one:
            return _name_json(one, two_calls, args)
    if one.find(KA, one.find(ALPHA)) >= 0:
        return _tagged(one, two_args, two_calls)
    raise ValueError("the rendered call is no Python list, JSON call or tagged call: "
                     f"{one[:80]!r}")


def _bracket_end(s: str, i: int) -> int:
    """The end of the bracketed Python literal starting at s[i] (quotes respected)."""
    depth, quote, k = 0, "", i
    while k < len(s):
        ch = s[k]
        if quote:
            if ch == "\\":
                k += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return k + 1
        k += 1
    raise ValueError("the rendered Python call list never closes")


def _python(one: str, two: str, i: int) -> CallFormat:
    end = _bracket_end(one, i)
    section, section_end = one[:i], one[end:]
    sep = ", "
    at, beta = two.find(ALPHA + "("), two.find(BETA + "(")
    if at >= 0 and beta > at:
        sep = two[_bracket_end(two, at + len(ALPHA)):beta]
    return CallFormat(PYTHON_LIST, section=section, section_end=section_end, sep=sep,
                      line_start=not section.strip())


def _json_at(text: str):
    """(start, end, value) of the first JSON list or object in `text` that holds the probe
    call; None when there is none."""
    dec = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch in "[{":
            try:
                value, end = dec.raw_decode(text, i)
            except ValueError:
                continue
            if ALPHA in json.dumps(value):
                return i, end, value
    return None


def _keys(obj: dict) -> tuple[str, str]:
    """(name key, arguments key) of a JSON call object."""
    name = next((k for k, v in obj.items() if v == ALPHA), None)
    args = next((k for k, v in obj.items() if v == {KA: V1} or v == json.dumps({KA: V1})
                 or (isinstance(v, str) and _loads(v) == {KA: V1})), None)
    if name is None or args is None:
        raise ValueError(f"the rendered JSON call has no name and arguments keys: {obj}")
    return name, args


def _loads(s: str):
    try:
        return json.loads(s)
    except ValueError:
        return None


def _json(one: str, two: str, i: int, end: int, value) -> CallFormat:
    if isinstance(value, list):
        if not value or not isinstance(value[0], dict):
            raise ValueError("the rendered JSON list holds no call object")
        name_key, args_key = _keys(value[0])
        sep = ", "
        found = _json_at(two)
        if found is not None and isinstance(found[2], list) and len(found[2]) == 2:
            body = two[found[0]:found[1]]
            first = json.JSONDecoder().raw_decode(body, body.index("{"))[1]
            sep = body[first:body.index("{", first)]
        return _with_keys(CallFormat(JSON_LIST, section=one[:i], section_end=one[end:],
                                     sep=sep, line_start=not one[:i].strip()),
                          name_key, args_key)
    name_key, args_key = _keys(value)
    pre, post = one[:i], one[end:]
    section, call, call_end, sep, section_end = "", pre, post, "\n", ""
    at = two.find(ALPHA)
    beta = two.find(BETA)
    if at >= 0 and beta > at:
        first = _json_at(two)
        second_at = two.rfind("{", 0, beta)
        if first is not None and second_at > first[1]:
            mid = two[first[1]:second_at]
            call = _at_tag(pre[len(pre) - _common_suffix(pre, mid):]) if pre.strip() else ""
            section = pre[:len(pre) - len(call)]
            rest = mid[:len(mid) - len(call)]
            call_end = post[:_common_prefix(rest, post)]
            sep, section_end = rest[len(call_end):], post[len(call_end):]
    return _with_keys(CallFormat(JSON_OBJECT, section=section, section_end=section_end,
                                 call=call, call_end=call_end, sep=sep,
                                 line_start=not (section + call).strip()),
                      name_key, args_key)


def _with_keys(fmt: CallFormat, name_key: str, args_key: str) -> CallFormat:
    alt = tuple(k for k in ("arguments", "parameters") if k != args_key)
    return replace(fmt, name_key=name_key, args_key=args_key, args_alt=alt)


_PREFIX = re.compile(r"[A-Za-z_]+\.$")  # a namespace written before every name (`functions.`)
_INDEX = re.compile(r"([:#_-])0(?!\d)")  # a call's position after its name (`:0`)


def _name_json(one: str, two: str, args: str) -> CallFormat:
    """The name in markers, the arguments one JSON object (`args`, the first call's): what
    stands before the name is the section and the call's opener (told apart by the second
    call), between name and arguments the name's end (after an index, `:0`, or a call id,
    `[CALL_ID]prismc000`), after them the call's closer, the separator and the section's."""
    a = one.find(args)
    n = one.rfind(ALPHA, 0, a)
    if n < 0:
        raise ValueError("the rendered call's arguments come before its name")
    pre, mid, post = one[:n], one[n + len(ALPHA):a], one[a + len(args):]
    if _call(0, "", {})["id"] in pre:
        raise ValueError("the rendered call writes its id before its name: no shape engine "
                         "reads that (a family of its own reads it)")
    found = _PREFIX.search(pre)
    prefix = found.group() if found and found.start() > 0 else ""
    pre = pre[:len(pre) - len(prefix)]
    index = ""
    if (m := _INDEX.match(mid)) and BETA + m.group(1) + "1" in two:
        index, mid = m.group(1), mid[m.end():]
    id_tag, cid = "", _call(0, "", {})["id"]
    if cid in mid:
        id_tag, mid = mid[:mid.index(cid)], mid[mid.index(cid) + len(cid):]
        if not id_tag.strip():
            raise ValueError("the rendered call's id has no tag before it")
    section, call, call_end, sep, section_end = "", pre, post, "\n", ""
    first, beta = two.find(args), two.find(BETA)
    if 0 <= first < beta:
        mid2 = two[first + len(args):beta].removesuffix(prefix)
        call = _at_tag(pre[len(pre) - _common_suffix(pre, mid2):]) if pre.strip() else ""
        section = pre[:len(pre) - len(call)]
        rest = mid2[:len(mid2) - len(call)]
        call_end = post[:_common_prefix(rest, post)]
        sep, section_end = rest[len(call_end):], post[len(call_end):]
    if not (section + call).strip():
        raise ValueError("a call whose name stands in markers has no opener before its name")
    return CallFormat(NAME_JSON, section=section, section_end=section_end, call=call,
                      call_end=call_end, sep=sep, name_end=mid, name_prefix=prefix, index=index,
                      id_tag=id_tag)


def _tagged(one: str, two_args: str, two_calls: str) -> CallFormat:
    n = one.find(ALPHA)
    k = one.find(KA, n)
    v = one.find(V1, k)
    if v < 0:
        raise ValueError("the rendered tagged call does not show the argument's value")
    pre = one[:n]
    name_param = one[n + len(ALPHA):k]
    key_value = one[k + len(KA):v]
    after = one[v + len(V1):]
    # One argument against two: what comes between the first value and the second key is the
    # value's closer and the next parameter's opener.
    v1 = two_args.find(V1)
    k2 = two_args.find(KB, v1)
    if v1 < 0 or k2 < 0:
        raise ValueError("the template does not render a call's second argument")
    between = two_args[v1 + len(V1):k2]
    param = _at_tag(name_param[len(name_param) - _common_suffix(name_param, between):])
    if not param.strip():
        raise ValueError("no parameter tag between a tagged call's arguments")
    name_end, value_end = name_param[:-len(param)], between[:-len(param)]
    inner = key_value.rstrip()
    cut = max(inner.rfind("<"), inner.rfind("["))
    key_end, value = (key_value[:cut], key_value[cut:]) if cut > 0 else \
        (inner, key_value[len(inner):])
    if not after.startswith(value_end):
        raise ValueError("a tagged call's last value ends unlike the others")
    post = after[len(value_end):]
    section, call, call_end, sep, section_end = "", pre, post, "\n", ""
    at, beta = two_calls.find(V1), two_calls.find(BETA)
    if at >= 0 and beta > at:
        mid = two_calls[at + len(V1) + len(value_end):beta]
        call = _at_tag(pre[len(pre) - _common_suffix(pre, mid):])
        section = pre[:len(pre) - len(call)]
        rest = mid[:len(mid) - len(call)]
        call_end = post[:_common_prefix(rest, post)]
        sep, section_end = rest[len(call_end):], post[len(call_end):]
    if not (section + call).strip():
        raise ValueError("a tagged call with no opener before its name")
    return CallFormat(TAGGED, section=section, section_end=section_end, call=call,
                      call_end=call_end, sep=sep, name_end=name_end, param=param,
                      key_end=key_end, value=value, value_end=value_end)


__all__ = ["CALLS", "NO_CALLS", "TOOLS", "Probe", "Render", "derive", "probe"]
