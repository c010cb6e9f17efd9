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

DeepSeek V4.1 writes the same tags with a space after `｜DSML｜` (`<｜DSML｜ calls>`,
`<｜DSML｜ invoke name="`, `<｜DSML｜ parameter name="`, their closers: its encoding/encoding.py),
read as another spelling of the one format. An invoke's body may also be one JSON arguments
object (`<｜DSML｜invoke name="f">{"city": "Paris"}</｜DSML｜invoke>`, SGLang's
DeepSeekV32Detector reads it), and an invoke without parameters may close itself
(`<｜DSML｜invoke name="f"/>`).

Choice where the other servers differ: a value is not stripped of its spaces (vLLM strips it),
only of one leading and one trailing newline, as the other XML-like families.
"""

from __future__ import annotations

from dataclasses import replace

from engine.parse.families.registry import register
from engine.parse.shapes.build import THINK, shape_family
from engine.parse.shapes.record import TAGGED, CallFormat

NAME = "dsml"
SECTION = "<｜DSML｜function_calls>"
SECTION_V4 = "<｜DSML｜tool_calls>"  # DeepSeek V4, V4-Flash
INVOKE = '<｜DSML｜invoke name="'
PARAM = '<｜DSML｜parameter name="'
PARAM_END = "</｜DSML｜parameter>"
INVOKE_END = "</｜DSML｜invoke>"
SECTION_END = "</｜DSML｜function_calls>"
SECTION_END_V4 = "</｜DSML｜tool_calls>"


def _spelling(section: str, sp: str = "") -> CallFormat:
    """One spelling of the format: its section's name and the space after `｜DSML｜` (V4.1)."""
    tag = "｜DSML｜" + sp
    return CallFormat(TAGGED, section=f"<{tag}{section}>\n", section_end=f"</{tag}{section}>",
                      call=f'<{tag}invoke name="', name_end='">\n',
                      param=f'<{tag}parameter name="', key_end='">',
                      value_end=f"</{tag}parameter>\n", call_end=f"</{tag}invoke>\n",
                      string_attr=True, json_body=True, self_closing=True)


FORMAT = replace(_spelling("function_calls"),
                 also=(_spelling("tool_calls"), _spelling("calls", " ")))
PRESERVED_TOKENS = (THINK[0], THINK[1], "｜DSML｜")

FAMILY = register(shape_family(
    FORMAT, name=NAME, models="DeepSeek V3.2, V4, V4.1", reasoning=THINK,
    detect=("｜DSML｜",), supersedes=("deepseek",), stops=("<｜end▁of▁sentence｜>",),
    preserved_tokens=PRESERVED_TOKENS, thinking=True, pack="dsml",
    tag_forms=(r"</?｜DSML｜ ?[A-Za-z_]+[^<>\n]*>",),
))
MARKERS, CallParser, match_opener = FAMILY.markers, FAMILY.call_parser, FAMILY.match_opener
