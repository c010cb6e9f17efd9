"""GLM (GLM-4.5, 4.6, 4.7): `<think>` reasoning and `<tool_call>NAME` with key/value pairs.

Owns the family's markers and the reader of one call. Run by whichever thread drives the
parser.

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    </tool_call>

(GLM-4.7 writes the same without the newlines.) Values are typed by the tool's schema
(engine/parse/schema.py): a string parameter keeps its raw text, anything else is JSON, then a
Python literal, then the raw text.

Ling 3.0 (inclusionai-ling-3.0-flash.jinja) and poolside Laguna (poolside-Laguna-*.jinja) write
the same calls and are detected as GLM, but end their turns with their own marker: Ling's
`<|role_end|>`, Laguna's `</assistant>`. GLM's stops (`<|user|>`, `<|observation|>`, the next
turn's role) are not in those templates, so a pack of one also stops on the end-of-turn marker its
template writes (engine/chat/packs.py `_stops`); GLM-4.6's stops stay its own. Neither marker is
written inside a turn.

Choices where the other servers differ: `<tool_call>` is a call only when a name follows and
then, after whitespace, `<arg_key>` or `</tool_call>` (so prose after `<tool_call>` stays text;
vLLM takes any text up to the first newline as the name); a call whose pairs are complete is
accepted at the end of output without `</tool_call>`.
"""

from __future__ import annotations

from engine.parse.families.common import Match
from engine.parse.families.framed import word_then
from engine.parse.families.registry import CallGrammar, Family, register, think_writer
from engine.parse.families.tagged import TaggedCall, write_value
from engine.parse.markers import CALL_CLOSE, CALL_OPEN, THINK_CLOSE, THINK_OPEN, Markers

NAME = "glm"
KEY = "<arg_key>"

MARKERS = Markers(THINK_OPEN, THINK_CLOSE, (CALL_OPEN,))
PRESERVED_TOKENS = (THINK_OPEN, THINK_CLOSE, CALL_OPEN, CALL_CLOSE, KEY, "</arg_key>",
                    "<arg_value>", "</arg_value>")


def match_opener(text: str, i: int) -> Match:
    """A name, then (after whitespace) `<arg_key>` or `</tool_call>`."""
    return word_then(text, i, CallParser.NAME_CHARS, (KEY, CALL_CLOSE), gap=True)


class CallParser(TaggedCall):
    NAME_EAT = False
    PARAM_OPEN = KEY
    KEY_END = "</arg_key>"
    VALUE_OPEN = "<arg_value>"
    VALUE_END = "</arg_value>"
    FUNC_CLOSE = CALL_CLOSE


def _write_call(call, index: int) -> str:
    pairs = "".join(
        f"{KEY}{k}</arg_key>\n<arg_value>"
        f"{write_value(v)}</arg_value>\n"
        for k, v in call.arguments.items())
    return f"{CALL_OPEN}{call.name}\n{pairs}{CALL_CLOSE}"


def _grammar_call(w, i: int, fn: dict) -> str:
    """A forced call as GBNF (`w`: engine/grammar/writer.py's Writer)."""
    params = w.tagged(i, fn, KEY, lambda raw: "</arg_key>\n<arg_value>", "</arg_value>\n",
                      "</arg_value>")
    return f"{w.seq(CALL_OPEN + fn['name'] + chr(10))} {params} {w.seq(CALL_CLOSE)}"


FAMILY = register(Family(
    name=NAME, models="GLM-4.5, 4.6, 4.7 (and Ling 3.0, Laguna)", markers=MARKERS,
    match_opener=match_opener,
    call_parser=CallParser, writer=think_writer(_write_call),
    detect=(KEY, "[gMASK]<sop>"), supersedes=("qwen-xml", "hermes-json"),
    stops=("<|user|>", "<|observation|>"), preserved_tokens=PRESERVED_TOKENS, thinking=True,
    pack="glm",
    grammar=CallGrammar(_grammar_call, sep="\n"),
))
