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

from engine.parse.families.common import Match
from engine.parse.families.framed import call_or_word
from engine.parse.families.registry import CallGrammar, Family, register, think_writer
from engine.parse.families.tagged import TaggedCall, write_value
from engine.parse.markers import THINK_CLOSE, THINK_OPEN, Markers

NAME = "minimax-xml"
SECTION = "<minimax:tool_call>"
INVOKE = '<invoke name="'
SECTION_END = "</minimax:tool_call>"

MARKERS = Markers(THINK_OPEN, THINK_CLOSE, (SECTION, INVOKE))
PRESERVED_TOKENS = (THINK_OPEN, THINK_CLOSE, SECTION, SECTION_END)


def match_opener(text: str, i: int) -> Match:
    """After the section: an invoke; after an invoke's opener: `NAME">`."""
    return call_or_word(text, i, INVOKE, CallParser.NAME_CHARS, ('">',))


class CallParser(TaggedCall):
    FUNC_OPEN = INVOKE
    NAME_END = ('">',)
    PARAM_OPEN = '<parameter name="'
    KEY_END = '"'
    ATTRS_END = ">"
    VALUE_END = "</parameter>"
    FUNC_CLOSE = "</invoke>"
    SECTION_CLOSE = SECTION_END


def _write_call(call, index: int) -> str:
    params = "".join(
        f'<parameter name="{k}">'
        f"{write_value(v)}</parameter>\n"
        for k, v in call.arguments.items())
    return f'{INVOKE}{call.name}">\n{params}</invoke>\n'


def _grammar_call(w, i: int, fn: dict) -> str:
    """A forced call as GBNF (`w`: engine/grammar/writer.py's Writer)."""
    params = w.tagged(i, fn, '<parameter name="', lambda raw: '">', "</parameter>\n",
                      "</parameter>")
    return f"{w.seq(INVOKE + fn['name'] + chr(34) + '>' + chr(10))} {params} " \
        f"{w.seq('</invoke>' + chr(10))}"


FAMILY = register(Family(
    name=NAME, models="MiniMax-M2", markers=MARKERS, match_opener=match_opener,
    call_parser=CallParser,
    writer=think_writer(_write_call, calls_open=SECTION + "\n", calls_sep="",
                  calls_close=SECTION_END),
    detect=(SECTION, "]~b]"), stops=("[e~[",), preserved_tokens=PRESERVED_TOKENS,
    thinking=True, pack="minimax-xml",
    tag_forms=(r"</?(?:invoke|parameter)\b[^<>\n]*>",),
    grammar=CallGrammar(_grammar_call, open=SECTION + "\n", close=SECTION_END),
))
