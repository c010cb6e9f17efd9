"""MiniMax XML (MiniMax-M2): `<think>` reasoning and `<minimax:tool_call>` sections of invokes.

Owns the family's markers and the reader of one call. Run by whichever thread drives the
parser.

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    </invoke>
    </minimax:tool_call>

Values are typed by the tool's schema (engine/parse/schema.py). Several invokes share one section:
each `<invoke name="` is read as its own call, and the section's end is consumed by the call
before it.

Choices where the other servers differ: an `<invoke name="NAME">` outside a section is a call
too (vLLM reads invokes only inside the section; a model that drops the section opener would
otherwise lose its call), unless quoted; values keep their spaces (vLLM strips them), losing
only one leading and one trailing newline.
"""

from __future__ import annotations

from engine.parse.families.registry import register
from engine.parse.markers import THINK_CLOSE, THINK_OPEN
from engine.parse.shapes.build import THINK, shape_family
from engine.parse.shapes.record import TAGGED, CallFormat

NAME = "minimax-xml"
SECTION = "<minimax:tool_call>"
INVOKE = '<invoke name="'
SECTION_END = "</minimax:tool_call>"

FORMAT = CallFormat(TAGGED, section=SECTION + "\n", section_end=SECTION_END, call=INVOKE,
                    name_end='">\n', param='<parameter name="', key_end='">',
                    value_end="</parameter>\n", call_end="</invoke>\n")
PRESERVED_TOKENS = (THINK_OPEN, THINK_CLOSE, SECTION, SECTION_END)

FAMILY = register(shape_family(
    FORMAT, name=NAME, models="MiniMax-M2", reasoning=THINK,
    detect=(SECTION, "]~b]"), stops=("[e~[",), preserved_tokens=PRESERVED_TOKENS,
    thinking=True, pack="minimax-xml",
    tag_forms=(r"</?(?:invoke|parameter)\b[^<>\n]*>",),
))
MARKERS, CallParser, match_opener = FAMILY.markers, FAMILY.call_parser, FAMILY.match_opener
