"""DSML (DeepSeek V3.2, V4): `<think>` reasoning and calls written in DeepSeek's markup language.

Owns the family's markers and the reader of one call. Run by whichever thread drives the
parser.

    <｜DSML｜function_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
    <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls>

DeepSeek V4 and V4-Flash write the same invokes in a `<｜DSML｜tool_calls>` section (their
templates, deepseek-ai-DeepSeek-V4*.jinja); both sections open a list of calls and either
closer ends it, so the wrapper is markup of the call, never answer or reasoning text. The writer
and the forced-call grammar write V3.2's `function_calls`, the section of the shipped pack
(resources/templates/dsml.jinja).

`string="true"` keeps the value's raw text; `string="false"` reads it as JSON (then a Python
literal, then the raw text); without the attribute the tool's schema decides
(engine/parse/schema.py). Several invokes share one section: each `<｜DSML｜invoke name="` is read
as its own call, and the section's end is consumed by the call before it.

Choice where the other servers differ: a value is not stripped of its spaces (vLLM strips it),
only of one leading and one trailing newline, as the other XML-like families.
"""

from __future__ import annotations

from engine.parse.families.common import Match
from engine.parse.families.framed import call_or_word
from engine.parse.families.registry import CallGrammar, Family, register, think_writer
from engine.parse.families.tagged import TaggedCall, write_value
from engine.parse.markers import THINK_CLOSE, THINK_OPEN, Markers

NAME = "dsml"
SECTION = "<｜DSML｜function_calls>"
SECTION_V4 = "<｜DSML｜tool_calls>"  # DeepSeek V4, V4-Flash
INVOKE = '<｜DSML｜invoke name="'
PARAM = '<｜DSML｜parameter name="'
PARAM_END = "</｜DSML｜parameter>"
INVOKE_END = "</｜DSML｜invoke>"
SECTION_END = "</｜DSML｜function_calls>"
SECTION_END_V4 = "</｜DSML｜tool_calls>"

MARKERS = Markers(THINK_OPEN, THINK_CLOSE, (SECTION, SECTION_V4, INVOKE))
PRESERVED_TOKENS = (THINK_OPEN, THINK_CLOSE, "｜DSML｜")


def match_opener(text: str, i: int) -> Match:
    """After the section: an invoke; after an invoke's opener: `NAME">`."""
    return call_or_word(text, i, INVOKE, CallParser.NAME_CHARS, ('">',))


class CallParser(TaggedCall):
    FUNC_OPEN = INVOKE
    NAME_END = ('">',)
    PARAM_OPEN = PARAM
    KEY_END = '"'
    ATTRS_END = ">"
    VALUE_END = PARAM_END
    FUNC_CLOSE = INVOKE_END
    SECTION_CLOSE = (SECTION_END, SECTION_END_V4)

    def attrs(self, text: str) -> bool | None:
        flag = text.replace(" ", "")
        if flag == 'string="true"':
            return True
        if flag == 'string="false"':
            return False
        return None


def _write_call(call, index: int) -> str:
    params = "".join(
        f'{PARAM}{k}" string="{"true" if isinstance(v, str) else "false"}">'
        f"{write_value(v)}{PARAM_END}\n"
        for k, v in call.arguments.items())
    return f'{INVOKE}{call.name}">\n{params}{INVOKE_END}\n'


def _grammar_call(w, i: int, fn: dict) -> str:
    """A forced call as GBNF (`w`: engine/grammar/writer.py's Writer)."""
    params = w.tagged(i, fn, PARAM, lambda raw: f'" string="{"true" if raw else "false"}">',
                      PARAM_END + "\n", PARAM_END)
    return f'{w.seq(INVOKE + fn["name"] + chr(34) + ">" + chr(10))} {params} ' \
        f"{w.seq(INVOKE_END + chr(10))}"


FAMILY = register(Family(
    name=NAME, models="DeepSeek V3.2, V4", markers=MARKERS, match_opener=match_opener,
    call_parser=CallParser,
    writer=think_writer(_write_call, calls_open=SECTION + "\n", calls_sep="",
                  calls_close=SECTION_END),
    detect=("｜DSML｜",), supersedes=("deepseek",), stops=("<｜end▁of▁sentence｜>",),
    preserved_tokens=PRESERVED_TOKENS, thinking=True, pack="dsml",
    tag_forms=(r"</?｜DSML｜[A-Za-z_]+[^<>\n]*>",),
    grammar=CallGrammar(_grammar_call, open=SECTION + "\n", close=SECTION_END),
))
