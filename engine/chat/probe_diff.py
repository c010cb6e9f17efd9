"""The template probe's diff: from the call texts a chat template rendered to a call record.

Owns the probe's names, keys and values (distinctive enough never to be part of a template's own
text) and `derive`: given the texts of one call with one argument, one call with two arguments
and two calls, what stays the same around what changes (names, keys, values) is the record's
markers, in the shape the texts show: a Python-call list, a JSON list, a JSON object in a
wrapper, a name in markers and a JSON arguments object (its namespace, index and id tag found by
comparing the two calls), or tagged key/value. Pure string work, no I/O; called by
engine/chat/probe.py on its caller's thread.
"""

from __future__ import annotations

import json
import re

from engine.parse.shapes.record import (
    JSON_LIST,
    JSON_OBJECT,
    NAME_JSON,
    PYTHON_LIST,
    TAGGED,
    CallFormat,
)

ALPHA, BETA = "prism_alpha", "prism_beta"
KA, KB, KC = "prism_ka", "prism_kb", "prism_kc"
V1, V2, NUM = "PRISM-V1", "PRISM-V2", 7


def call_id(i: int) -> str:
    """The id of the probe's i-th call."""
    return f"prismc{i:03d}"


def common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def common_suffix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[-1 - i] == b[-1 - i]:
        i += 1
    return i


def _tag_prefix(a: str, b: str) -> int:
    """The common prefix of `a` and `b`, never ending inside a tag both open alike (`<|` of
    `<|end|>` against `<|call|>`)."""
    n = common_prefix(a, b)
    opened = b.rfind("<", 0, n)
    return opened if opened > b.rfind(">", 0, n) else n


def _at_tag(s: str) -> str:
    """`s` from its first `<` or `[` on (a marker starts at a tag, not inside the one
    before it: `>\\n<parameter=` is `<parameter=`); `s` when it has none."""
    at = min((i for i in (s.find("<"), s.find("[")) if i >= 0), default=-1)
    return s[at:] if at > 0 else s


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
    args = next((k for k, v in obj.items() if _is_args(v)), None)
    if name is None or args is None:
        raise ValueError(f"the rendered JSON call has no name and arguments keys: {obj}")
    return name, args


def _loads(s: str):
    try:
        return json.loads(s)
    except ValueError:
        return None


def _is_args(v) -> bool:
    return v == {KA: V1} or (isinstance(v, str) and _loads(v) == {KA: V1})


def _list_fields(obj: dict) -> dict:
    """A list's call object as record fields: keyed by its name (Apertus' `{NAME: ARGS}`), or
    its name's and arguments' keys and the key of an id the model writes (Cohere's
    `tool_call_id`, the call's position or the client's id), read and never required."""
    if len(obj) == 1 and _is_args(obj.get(ALPHA)):
        return {"keyed": True}
    keys = _key_fields(obj)
    id_key = next((k for k, v in obj.items() if k not in (keys["name_key"], keys["args_key"])
                   and v in (call_id(0), "0", 0)), "")
    return {**keys, "id_key": id_key}


def _json(one: str, two: str, i: int, end: int, value) -> CallFormat:
    if isinstance(value, list):
        if not value or not isinstance(value[0], dict):
            raise ValueError("the rendered JSON list holds no call object")
        fields = _list_fields(value[0])
        sep = ", "
        found = _json_at(two)
        if found is not None and isinstance(found[2], list) and len(found[2]) == 2:
            body = two[found[0]:found[1]]
            first = json.JSONDecoder().raw_decode(body, body.index("{"))[1]
            sep = body[first:body.index("{", first)]
        return CallFormat(JSON_LIST, section=one[:i], section_end=one[end:], sep=sep,
                          line_start=not one[:i].strip(), **fields)
    pre, post = one[:i], one[end:]
    section, call, call_end, sep, section_end = "", pre, post, "\n", ""
    at = two.find(ALPHA)
    beta = two.find(BETA)
    if at >= 0 and beta > at:
        first = _json_at(two)
        second_at = two.rfind("{", 0, beta)
        if first is not None and second_at > first[1]:
            mid = two[first[1]:second_at]
            call = _at_tag(pre[len(pre) - common_suffix(pre, mid):]) if pre.strip() else ""
            section = pre[:len(pre) - len(call)]
            rest = mid[:len(mid) - len(call)]
            call_end = post[:_tag_prefix(rest, post)]
            sep, section_end = rest[len(call_end):], post[len(call_end):]
            if not (call + call_end).strip():  # whitespace is no call's tag (MiniMax M1's lines)
                section, call, call_end, sep, section_end = pre, "", "", mid, post
    return CallFormat(JSON_OBJECT, section=section, section_end=section_end, call=call,
                      call_end=call_end, sep=sep, line_start=not (section + call).strip(),
                      **_key_fields(value))


def _key_fields(obj: dict) -> dict:
    """A JSON call object's name and arguments keys as record fields, the other usual
    arguments key read too."""
    name_key, args_key = _keys(obj)
    alt = tuple(k for k in ("arguments", "parameters") if k != args_key)
    return {"name_key": name_key, "args_key": args_key, "args_alt": alt}


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
    if call_id(0) in pre:
        raise ValueError("the rendered call writes its id before its name: no shape engine "
                         "reads that (a family of its own reads it)")
    found = _PREFIX.search(pre)
    prefix = found.group() if found and found.start() > 0 else ""
    pre = pre[:len(pre) - len(prefix)]
    index = ""
    if (m := _INDEX.match(mid)) and BETA + m.group(1) + "1" in two:
        index, mid = m.group(1), mid[m.end():]
    id_tag, cid = "", call_id(0)
    if cid in mid:
        id_tag, mid = mid[:mid.index(cid)], mid[mid.index(cid) + len(cid):]
        if not id_tag.strip():
            raise ValueError("the rendered call's id has no tag before it")
    section, call, call_end, sep, section_end = "", pre, post, "\n", ""
    first, beta = two.find(args), two.find(BETA)
    if 0 <= first < beta:
        mid2 = two[first + len(args):beta].removesuffix(prefix)
        call = _at_tag(pre[len(pre) - common_suffix(pre, mid2):]) if pre.strip() else ""
        section = pre[:len(pre) - len(call)]
        rest = mid2[:len(mid2) - len(call)]
        call_end = post[:_tag_prefix(rest, post)]
        sep, section_end = rest[len(call_end):], post[len(call_end):]
        last = two.rfind(call_end) if call_end else -1
        if section.strip() and not section_end.strip() and last > beta:
            # The section closed only after a second call (DeepSeek R1 Distill Llama's
            # template): the closer is the two-call render's tail.
            section_end = two[last + len(call_end):]
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
    param = _at_tag(name_param[len(name_param) - common_suffix(name_param, between):])
    if not param.strip():
        raise ValueError("no parameter tag between a tagged call's arguments")
    name_end, value_end = name_param[:-len(param)], between[:-len(param)]
    inner = key_value.rstrip()
    cut = max(inner.rfind("<"), inner.rfind("["))
    key_end, value = (key_value[:cut], key_value[cut:]) if cut > 0 else \
        (inner, key_value[len(inner):])
    # A key's tag that says whether its value is a raw string (DSML's ` string="true"`, and
    # `"false"` before the number): the record's `string_attr`, the key's end without it.
    string_attr, attr = False, ' string="true"'
    if attr in key_end and KB + key_end.replace(attr, ' string="false"') in two_args:
        string_attr, key_end = True, key_end.replace(attr, "")
    elif KB + key_end not in two_args:  # Kimi K3's ` type="string"`, ` type="integer"`
        raise ValueError("a tagged key's tag differs with its value's type: no record field "
                         f"writes that ({key_end!r})")
    if BETA in two_calls and BETA + name_end not in two_calls:  # Kimi K3's ` index="1"`
        raise ValueError("a tagged call's name ends unlike the next call's (its position?): "
                         f"no record field writes that ({name_end!r})")
    if not after.startswith(value_end):
        raise ValueError("a tagged call's last value ends unlike the others")
    post = after[len(value_end):]
    section, call, call_end, sep, section_end = "", pre, post, "\n", ""
    at, beta = two_calls.find(V1), two_calls.find(BETA)
    if at >= 0 and beta > at:
        mid = two_calls[at + len(V1) + len(value_end):beta]
        call = _at_tag(pre[len(pre) - common_suffix(pre, mid):])
        section = pre[:len(pre) - len(call)]
        rest = mid[:len(mid) - len(call)]
        call_end = post[:_tag_prefix(rest, post)]
        sep, section_end = rest[len(call_end):], post[len(call_end):]
    if not (section + call).strip():
        raise ValueError("a tagged call with no opener before its name")
    return CallFormat(TAGGED, section=section, section_end=section_end, call=call,
                      call_end=call_end, sep=sep, name_end=name_end, param=param,
                      key_end=key_end, value=value, value_end=value_end,
                      string_attr=string_attr)


__all__ = ["ALPHA", "BETA", "KA", "KB", "KC", "NUM", "V1", "V2", "call_id", "common_prefix",
           "common_suffix", "derive"]
