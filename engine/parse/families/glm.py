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

from engine.parse.families.registry import register
from engine.parse.markers import CALL_CLOSE, CALL_OPEN, THINK_CLOSE, THINK_OPEN
from engine.parse.shapes.build import THINK, shape_family
from engine.parse.shapes.record import TAGGED, CallFormat

NAME = "glm"
KEY = "<arg_key>"

FORMAT = CallFormat(TAGGED, call=CALL_OPEN, name_end="\n", param=KEY, key_end="</arg_key>\n",
                    value="<arg_value>", value_end="</arg_value>\n", call_end=CALL_CLOSE,
                    sep="\n")
PRESERVED_TOKENS = (THINK_OPEN, THINK_CLOSE, CALL_OPEN, CALL_CLOSE, KEY, "</arg_key>",
                    "<arg_value>", "</arg_value>")

FAMILY = register(shape_family(
    FORMAT, name=NAME, models="GLM-4.5, 4.6, 4.7 (and Ling 3.0, Laguna)",
    reasoning=THINK,
    detect=(KEY, "[gMASK]<sop>"), supersedes=("qwen-xml", "hermes-json"),
    stops=("<|user|>", "<|observation|>"), preserved_tokens=PRESERVED_TOKENS, thinking=True,
    pack="glm",
))
MARKERS, CallParser, match_opener = FAMILY.markers, FAMILY.call_parser, FAMILY.match_opener
