"""FireFunction v2 (Fireworks' Llama 3 tool model): no reasoning; calls as one JSON list after
` functools`.

Owns the family's markers and its record (`FORMAT`, a json-list shape after ` functools`,
engine/parse/shapes/json_list.py: the reader, writer and forced-call grammar come from it; the
opener holds the list's `[`, so the reader starts at its first object). Run by whichever thread
drives the parser.

    Checking. functools[{"name": "get_weather", "arguments": {"city": "Paris"}}, {...}]

What its template (fireworks-ai-llama-3-firefunction-v2.jinja) writes: Llama 3 turns
(`<|start_header_id|>ROLE<|end_header_id|>\n\n…<|eot_id|>`), the tools as the JSON text of a
`functions` variable in the system turn, and an assistant turn's calls after its (trimmed)
content as ` functools[` + `{"name": "NAME", "arguments": ARGS}` joined by `, ` + `]`, with no
closing marker; its generation prompt is the assistant header, so the model answers at once
(there is no reasoning). The opener is ` functools[` with its space (the space is the
opener's, not the answer's), or `functools[` where nothing precedes it; each element of the
list is read by the Hermes JSON scanner (engine/parse/families/hermes_json.py) as its own call
(`follow` hands the next element to the parser), so `arguments` or `parameters` both work and
a `]` inside a string never ends the list.

Choices where the other servers differ: vLLM and SGLang have no FireFunction parser; llama.cpp
(`common_chat_parse_firefunction_v2`) takes the first ` functools[` anywhere in the output and
reads the rest as one JSON array. Here the opener counts only outside code fences and inline
code, an element that is not a call comes back as text (`malformed_call`) after the calls
before it, and text after the list is the answer's (llama.cpp leaves no answer after it); a
list whose elements are complete is accepted at the end of output without its `]`.

Detected by ` functools[` (as llama.cpp detects it), superseding llama3-json (its Llama 3
turns). ` functools[` is preserved as llama.cpp preserves it (plain text in the vocabulary).
"""

from __future__ import annotations

from engine.parse.families import hermes_json
from engine.parse.families.common import Match
from engine.parse.families.registry import Family, register
from engine.parse.markers import Markers
from engine.parse.shapes.build import grammar_of, writer_of
from engine.parse.shapes.json_list import list_reader
from engine.parse.shapes.record import JSON_LIST, CallFormat

NAME = "firefunction"
CALLS = " functools["
CALLS_BARE = "functools["

FORMAT = CallFormat(JSON_LIST, section=" functools", sep=", ")
MARKERS = Markers(None, None, (CALLS, CALLS_BARE))
PRESERVED_TOKENS = (CALLS,)


def match_opener(text: str, i: int) -> Match:
    """After the opener and whitespace: the list's first object, `{` then `"name"`."""
    return hermes_json.match_opener(text, i)


class CallParser(list_reader(FORMAT)):
    """The record's list reader, started after the opener's `[` (each element is its own call:
    `follow` hands the next one to the parser)."""

    opened = True


__all__ = ["FORMAT", "MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "match_opener"]


FAMILY = register(Family(
    name=NAME, models="FireFunction v2 (Llama 3 70B)", markers=MARKERS,
    match_opener=match_opener, call_parser=CallParser,
    writer=writer_of(FORMAT, before_calls=""), format=FORMAT,
    detect=(CALLS,), supersedes=("llama3-json",), stops=("<|eot_id|>",),
    preserved_tokens=PRESERVED_TOKENS, thinking=False, pack=NAME, repairs_history=False,
    grammar=grammar_of(FORMAT),
    tag_forms=(r" ?functools\[",),  # the raw view draws the opener (no `<`) as a tag
))
