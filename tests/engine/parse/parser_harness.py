"""Drives the parser the ways the invariants speak of: whole, 1 character at a time, in random
chunks, with stream_tools on and off; checks the invariants that hold for every input. Also the
tools and calls that the parser's tests (test_parser.py, test_parser_tags.py,
test_parser_calls.py) share."""

from __future__ import annotations

import json
import random

from engine.parse.events import MARKUP, TOOL_ARGS, TOOL_CALL, TOOL_START, merge, result_of
from engine.parse.parser import OutputParser


def run(text: str, chunks=None, **kw):
    kw.setdefault("id_prefix", "")
    p = OutputParser(**kw)
    events = []
    if chunks is None:
        events += p.feed(text)
    else:
        i = 0
        for n in chunks:
            events += p.feed(text[i : i + n])
            i += n
        events += p.feed(text[i:])
    events += p.finish()
    return events


def random_chunks(text: str, seed: int, hi: int = 9) -> list[int]:
    rng = random.Random(seed)
    out, total = [], 0
    while total < len(text):
        n = rng.randint(1, hi)
        out.append(n)
        total += n
    return out


def check_invariants(text: str, events) -> None:
    # spans tile the input: every character accounted for exactly once, in order
    pos = 0
    for ev in events:
        assert ev.span[0] == pos, f"gap/overlap at {pos}: {ev}"
        assert ev.span[1] >= ev.span[0]
        pos = ev.span[1]
    assert pos == len(text)
    # text events carry exactly their raw span, except a call returned as text after it had
    # streamed (its text repeats what the tool events consumed)
    streamed_call = False
    for ev in events:
        if ev.kind in (TOOL_START, TOOL_ARGS):
            streamed_call = True
        if ev.kind == MARKUP:
            assert ev.text == text[ev.span[0] : ev.span[1]]
        if ev.kind in ("reasoning", "content") and not streamed_call:
            assert ev.text == text[ev.span[0] : ev.span[1]], ev
        if ev.kind == TOOL_CALL:
            streamed_call = False
    # streamed arguments join to exactly json.dumps(arguments): those since the call's own
    # tool_start (a call that failed after it began streaming left its fragments before it,
    # under the same index: the next call takes that index again)
    for k, ev in enumerate(events):
        if ev.kind == TOOL_CALL and any(e.kind == TOOL_START for e in events):
            own = max((j for j in range(k) if events[j].kind == TOOL_START
                       and events[j].index == ev.index), default=0)
            frags = "".join(e.text for e in events[own:k]
                            if e.kind == TOOL_ARGS and e.index == ev.index)
            assert frags == json.dumps(ev.call.arguments), (frags, ev.call.arguments)


def parse_all_ways(text: str, seeds=(1, 2, 3), **kw):
    """Parse `text` whole, per character and in random chunks, stream_tools off and on.
    Asserts that merged events agree within each setting and results agree across all;
    returns the ParseResult."""
    results = []
    for stream in (False, True):
        kw2 = dict(kw, stream_tools=stream)
        whole = run(text, **kw2)
        check_invariants(text, whole)
        ref = merge(whole)
        variants = [[1] * len(text)] + [random_chunks(text, s) for s in seeds]
        for chunks in variants:
            evs = run(text, chunks, **kw2)
            check_invariants(text, evs)
            assert merge(evs) == ref, f"chunking changed events (stream_tools={stream})"
        results.append(result_of(whole))
    assert results[0] == results[1], "stream_tools changed the result"
    return results[0]


# --- the inputs the parser's tests share ------------------------------------------------------

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"},
            "metric": {"type": "boolean"}, "opts": {"type": "object"},
            "code": {"type": "string"}, "tags": {"type": "array"},
        }}}},
    {"type": "function", "function": {"name": "read_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}}}},
]

XML_CALL = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "</function>\n</tool_call>"
)
HERMES_CALL = (
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "/etc/hosts"}}\n</tool_call>'
)
BARE_CALL = "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>"


def xml_call(params: str, name: str = "get_weather") -> str:
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def anomalies(res) -> dict:
    return {k: v for k, v in res.anomalies.items() if v}
