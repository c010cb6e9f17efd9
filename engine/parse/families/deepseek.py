"""DeepSeek R1, V3 and V3.1: `<think>` reasoning and calls framed by DeepSeek's own tokens.

Owns the family's record (a name-json `CallFormat`, engine/parse/shapes/name_json.py, which
reads, writes and forces its calls: V3.1's layout written, both read). Run by whichever thread
drives the parser.

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
    ```json
    {...}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>                      (R1, V3)

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>
    <｜tool▁calls▁end｜>                                            (V3.1)

Several calls share one section; each `<｜tool▁call▁begin｜>` is read as its own call, and the
section's end is consumed by the call before it. The two layouts are told apart after the
separator: a `{` there is V3.1's arguments (its word before the separator is the name), anything
else is V3's name (the word before was the call type, `function`: the record's `typed`).

Choices where the other servers differ: V3's ```json fence around the arguments is optional
(`fence`; llama.cpp requires it, vLLM's regex does too, models drop it); a
`<｜tool▁call▁begin｜>` without the section opener still starts a call when `NAME<｜tool▁sep｜>`
follows (vLLM's V3.1 parser requires the section); a call whose arguments are complete is
accepted at the end of output.
"""

from __future__ import annotations

from engine.parse.families.registry import register
from engine.parse.markers import THINK_CLOSE, THINK_OPEN
from engine.parse.shapes.build import THINK, shape_family
from engine.parse.shapes.record import NAME_JSON, CallFormat

NAME = "deepseek"
CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
SEP = "<｜tool▁sep｜>"
CALL_END = "<｜tool▁call▁end｜>"
CALLS_END = "<｜tool▁calls▁end｜>"

FORMAT = CallFormat(NAME_JSON, section=CALLS_BEGIN, section_end=CALLS_END, call=CALL_BEGIN,
                    name_end=SEP, call_end=CALL_END, typed=True, fence=True)
PRESERVED_TOKENS = (THINK_OPEN, THINK_CLOSE, CALLS_BEGIN, CALL_BEGIN, SEP, CALL_END, CALLS_END)

FAMILY = register(shape_family(
    FORMAT, name=NAME, models="DeepSeek R1, V3, V3.1", reasoning=THINK,
    detect=(CALLS_BEGIN, "<｜Assistant｜>"), stops=("<｜end▁of▁sentence｜>",),
    preserved_tokens=PRESERVED_TOKENS, thinking=True, pack="deepseek",
))
MARKERS, match_opener, CallParser = FAMILY.markers, FAMILY.match_opener, FAMILY.call_parser

__all__ = ["FORMAT", "MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "match_opener"]
