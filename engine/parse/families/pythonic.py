"""Pythonic calls (Llama 3.2 and Llama 4 pythonic templates, ToolACE, ...): no reasoning; the
calls are a bare Python-call list at the start of a line, the whole reply or after text.

Owns the format's record; the python-list shape (engine/parse/shapes/python_calls.py) reads,
writes and forces it. Run by whichever thread drives the parser.

    [get_weather(city="Paris"), get_time(tz="UTC")]

Values are Python literals, nested lists and dicts and `True` / `False` / `None` too (vLLM's
`pythonic` tool parser reads the same). No template marker names the format (its templates
describe it in prose), so it is chosen with `--family pythonic`, never detected from markers.

Choices where the other servers differ: the list is a call only at the start of a line and when
`NAME(` (or a JSON call object) follows its `[` (vLLM's parser needs the whole output to be the
list; prose after the list stays text here, prose before it too); a `[` followed by anything
else is text; a list whose calls are complete is a call at the end of output without its `]`
(repaired: "no ]").
"""

from __future__ import annotations

from engine.parse.families.registry import register
from engine.parse.shapes.build import shape_family
from engine.parse.shapes.record import PYTHON_LIST, CallFormat

NAME = "pythonic"
FORMAT = CallFormat(PYTHON_LIST, sep=", ", line_start=True)

FAMILY = register(shape_family(
    FORMAT, name=NAME, models="Llama 3.2 / 4 pythonic templates, ToolACE (bare Python calls)",
    thinking=False, repairs_history=False,
))
MARKERS, CallParser, match_opener = FAMILY.markers, FAMILY.call_parser, FAMILY.match_opener
