"""Granite 3.3 (IBM Granite 3.x Instruct): `<think>` reasoning and `<|tool_call|>` followed by a
JSON list of calls.

Owns the family's record (`FORMAT`, a json-list shape whose lone object is a list of one and
whose missing `]` is repaired: reader, writer and forced-call grammar come from it,
engine/parse/shapes/json_list.py). Run by whichever thread drives the parser.

    <|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}},
                  {"name": "get_time", "arguments": {"zone": "CET"}}]

(one line, as the model writes it). Each element of the list is its own call: `follow` hands
the next one to the parser, so the calls stream one by one. Each element is read by the Hermes
JSON scanner (engine/parse/families/hermes_json.py), so `parameters` works as well as
`arguments`, an `arguments` string holding JSON is decoded, and a `]` inside a string never ends
the list. The template asks for reasoning, when thinking, as `<think>…</think>` and for the answer
as `<response>…</response>`: the response tags are markup, not part of the answer.

Granite 4.0 and 4.1 write Hermes calls (`<tool_call>{…}</tool_call>`, their templates carry no
`<|tool_call|>`): they stay detected as hermes-json.

Choices where the other servers differ: an element may name its arguments before its name (as
vLLM's tests have Granite write it); a list may follow text and text may follow it (vLLM's
granite parser reads a list only at the very start of the output and drops the answer then; a
JSON example quoted in backticks or a fence stays text); a bare object after `<|tool_call|>` is
one call (llama.cpp accepts any JSON there, vLLM only a list); a list left without its `]` is
accepted at the end of output, and elsewhere repaired (`repaired_call`, "no ]"); `<response>`
and `</response>` are markup wherever they stand unquoted in the answer (llama.cpp strips them
only around the answer), text in the reasoning, and the writer does not write them; Granite
3.1's `<tool_call> [` string form (which vLLM's granite parser also takes) is not read: no
template here writes it.
"""

from __future__ import annotations

from engine.parse.families.registry import register
from engine.parse.markers import THINK_CLOSE, THINK_OPEN
from engine.parse.shapes.build import THINK, shape_family
from engine.parse.shapes.record import JSON_LIST, CallFormat

NAME = "granite"
TOOL_CALL = "<|tool_call|>"
RESPONSE = "<response>"
RESPONSE_END = "</response>"

FORMAT = CallFormat(JSON_LIST, section=TOOL_CALL, sep=", ", single=True, repair_close=True)
PRESERVED_TOKENS = (THINK_OPEN, THINK_CLOSE, RESPONSE, RESPONSE_END, TOOL_CALL)

FAMILY = register(shape_family(
    FORMAT, name=NAME, models="Granite 3.x Instruct (3.3)", reasoning=THINK,
    writer={"before_calls": ""}, markers={"markup": (RESPONSE, RESPONSE_END)},
    detect=(TOOL_CALL,), stops=("<|end_of_text|>",), preserved_tokens=PRESERVED_TOKENS,
    thinking=False, pack="granite",
))
MARKERS, CallParser, match_opener = FAMILY.markers, FAMILY.call_parser, FAMILY.match_opener
