"""Pythonic calls between `<|python_start|>` and `<|python_end|>` (Llama 4's pythonic calls):
no reasoning; a Python-call list inside the two tokens.

Owns the format's record; the python-list shape (engine/parse/shapes/python_calls.py) reads,
writes and forces it. Run by whichever thread drives the parser.

    <|python_start|>[get_weather(city="Paris"), get_time(tz="UTC")]<|python_end|>

vLLM's `llama4_pythonic` parser reads the same (and strips the two tokens). Chosen with
`--family pythonic-tagged`: Llama 4's templates also write JSON calls, so their header tokens
do not decide the format.

Choices where the other servers differ: the answer may go on after `<|python_end|>`; a list
whose calls are complete is a call at the end of output without `<|python_end|>`.
"""

from __future__ import annotations

from engine.parse.families.registry import register
from engine.parse.shapes.build import shape_family
from engine.parse.shapes.record import PYTHON_LIST, CallFormat

NAME = "pythonic-tagged"
PYTHON_START = "<|python_start|>"
PYTHON_END = "<|python_end|>"
FORMAT = CallFormat(PYTHON_LIST, section=PYTHON_START, section_end=PYTHON_END, sep=", ")

FAMILY = register(shape_family(
    FORMAT, name=NAME, models="Llama 4 pythonic calls (<|python_start|>)",
    writer={"before_calls": ""}, preserved_tokens=(PYTHON_START, PYTHON_END),
    never_stops=(PYTHON_END,), thinking=False, repairs_history=False,
))
MARKERS, CallParser, match_opener = FAMILY.markers, FAMILY.call_parser, FAMILY.match_opener
