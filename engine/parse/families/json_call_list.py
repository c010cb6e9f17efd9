"""Bare JSON call lists: no reasoning; the calls are a JSON list of call objects at the start of
a line, the whole reply or after text.

Owns the format's record; the json-list shape (engine/parse/shapes/json_list.py) reads, writes
and forces it. Run by whichever thread drives the parser.

    [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", ...}]

`parameters` is read as well as `arguments`, in either order with the name. No template marker
names the format, so it is chosen with `--family json-list`, never detected from markers.

Choices where the other servers differ: the list is a call only at the start of a line and when
a call object (`{"name"` or `{"arguments"`) follows its `[` (a JSON example in prose stays
text); prose after the list stays text.
"""

from __future__ import annotations

from engine.parse.families.registry import register
from engine.parse.shapes.build import shape_family
from engine.parse.shapes.record import JSON_LIST, CallFormat

NAME = "json-list"
FORMAT = CallFormat(JSON_LIST, sep=", ", line_start=True)

FAMILY = register(shape_family(
    FORMAT, name=NAME, models="templates whose models write a bare JSON list of calls",
    thinking=False, repairs_history=False,
))
MARKERS, CallParser, match_opener = FAMILY.markers, FAMILY.call_parser, FAMILY.match_opener
