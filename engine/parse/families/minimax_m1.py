"""MiniMax-M1: `<think>` reasoning and a `<tool_calls>` section of JSON calls, one per line.

Owns the family's markers and its record (`FORMAT`, a json-object shape in a section: the
reader, writer and forced-call grammar come from it, engine/parse/shapes/json_object.py). Run
by whichever thread drives the parser.

    <think>
    The user wants the weather.
    </think>

    Checking.
    <tool_calls>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    {"name": "get_weather", "arguments": {"city": "Lyon"}}
    </tool_calls>

What MiniMax-M1's template (MiniMax-M1.jinja) writes: turns as
`<beginning_of_sentence>ROLE name=…\n…<end_of_sentence>\n`, the tools as JSON lines in a
`tool_setting=tools` system turn, a call list as `<tool_calls>\n` then one
`{"name": …, "arguments": …}` line per call, then `</tool_calls>`; its generation prompt is
`<beginning_of_sentence>ai name=assistant\n` and never opens the reasoning: the model writes
`<think>` itself (it always thinks). Each object is read by the Hermes JSON scanner
(engine/parse/families/hermes_json.py), so a `}` or `</tool_calls>` inside a string never ends
it; after an object, a `{` continues the section (`follow`, the next call) and
`</tool_calls>` ends it.

Choices where the other servers differ: a section inside the reasoning is a call only where
Prism's rule 3 says (at a line start, unquoted: an implicit end of the reasoning); vLLM's
`minimax` parser drops every `<tool_calls>` section found between `<think>` and `</think>`.
vLLM reads only lines that begin with `{` and end with `}` and skips any other line of the
section silently; here an object may span lines (vLLM: "multiline JSON not supported"), and a
line that is not a call ends the section, coming back as text with `malformed_call` (never
dropped silently). vLLM keeps only objects with both "name" and "arguments"; here a missing
"arguments" is `{}` (and "parameters" is read too, as Hermes JSON does), and a section whose
first object does not begin with "name" is no call at all (text, as any opener not followed by
its body). The answer after the section is text (vLLM drops what follows `<tool_calls>`). A
section without `</tool_calls>` is accepted at the end of output, as vLLM's reader does
(llama.cpp has no MiniMax-M1 format of its own; SGLang's MiniMax detector reads M2's XML).
The template never opens the reasoning, so the parser starts in the answer and the model's own
`<think>` is consumed there.

Detected by the turn marker `<beginning_of_sentence>`, not by `<tool_calls>`, which Apriel's
templates write too (`<tool_calls>[…]`); MiniMax-M2's `<minimax:tool_call>` stays minimax-xml.
"""

from __future__ import annotations

from engine.parse.families.registry import Family, register
from engine.parse.markers import THINK_CLOSE, THINK_OPEN, Markers
from engine.parse.shapes import json_object
from engine.parse.shapes.build import grammar_of, writer_of
from engine.parse.shapes.record import JSON_OBJECT, CallFormat

NAME = "minimax-m1"
SECTION = "<tool_calls>"
SECTION_END = "</tool_calls>"

MARKERS = Markers(THINK_OPEN, THINK_CLOSE, (SECTION,))
PRESERVED_TOKENS = (THINK_OPEN, THINK_CLOSE, SECTION, SECTION_END)


__all__ = ["MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "match_opener"]


FORMAT = CallFormat(JSON_OBJECT, section=SECTION + "\n", section_end="\n" + SECTION_END,
                    sep="\n")
# The json-object shape's reader of a section of objects: after an object, `{` is the next
# call, `</tool_calls>` ends the section, anything else is the answer's text again.
CallParser = json_object.object_reader(FORMAT)
match_opener = json_object.opener_test(FORMAT)  # after `<tool_calls>` and whitespace: `{"name"`


FAMILY = register(Family(
    name=NAME, models="MiniMax-M1 (40k, 80k)", markers=MARKERS, match_opener=match_opener,
    call_parser=CallParser,
    writer=writer_of(FORMAT, think=True), format=FORMAT,
    detect=("<beginning_of_sentence>",), stops=("<end_of_sentence>",),
    preserved_tokens=PRESERVED_TOKENS, thinking=True, pack=NAME,
    grammar=grammar_of(FORMAT),
))
