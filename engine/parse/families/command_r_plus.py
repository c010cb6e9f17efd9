"""Command R+ and Command R (Cohere's tool-use template of 2024): no reasoning; calls are an
`Action:` line followed by a fenced JSON list of `{"tool_name", "parameters"}`.

Owns the family's markers, its record (`FORMAT`, a json-list shape, whose reader,
engine/parse/shapes/json_list.py, reads its list after the fence) and its writer. Run by
whichever thread drives the parser.

    Let me look that up.
    Action:
    ```json
    [
        {
            "tool_name": "get_weather",
            "parameters": {"city": "Paris"}
        }
    ]```

`Action:` opens a call only at the start of a line, and only when the fence (```` ```json ````
or a bare ```` ``` ````, or no fence) and a list whose first object begins with `"tool_name"`
follow: an `Action:` in prose stays text. Each object of the list is its own call
(engine/parse/shapes/json_list.py); the last one consumes `]` and the closing fence. The
turn ends with `<|END_OF_TURN_TOKEN|>`. The tool-use template tells the model to call
`directly-answer` when no tool is needed; that is a call like any other (an `unknown_tool`
unless the client declared it): answering then takes Cohere's second, grounded prompt, which
is the client's to send.

The template (CohereForAI-c4ai-command-r-plus-tool_use.jinja) ships no pack: it cannot render
a request without tools (`for tool in tools` over none), nor a tool whose parameters lack a
`description`, and it appends its "Write 'Action:'" turn after every conversation. A GGUF's
own template is detected by `directly-answer` (the tool-use template) or `<|CHATBOT_TOKEN|>`
(the plain Command R / R+ templates; Command R7B's, which also write it, are detected first).

Choices where the other servers differ (none of vLLM, llama.cpp or SGLang has a parser for
this format: llama.cpp reads these templates as plain content): an `Action:` list without the
fence, and a lone object instead of a list, are calls too; a model's `tool_call_id`, should it
write one before the name, is kept as Command R7B's is.
"""

from __future__ import annotations

import json
import re

from engine.parse.families.common import FULL, NONE, PREFIX, Match, match_literal, skip_ws
from engine.parse.families.registry import CallGrammar, Family, Writer, register
from engine.parse.markers import Markers
from engine.parse.shapes.json_list import list_opener, list_reader
from engine.parse.shapes.record import JSON_LIST, CallFormat

NAME = "command-r-plus"
ACTION = "Action:"
FENCE = "```"
TURN_END = "<|END_OF_TURN_TOKEN|>"
KEYS = ("tool_name", "name", "tool_call_id")  # what a call object may begin with
_MAX_LANG = 16  # the fence's info word (`json`)

MARKERS = Markers(None, None, (ACTION,), line_calls=(ACTION,))


def _fence_end(text: str, i: int) -> tuple[Match, int]:
    """A fence at text[i] (```` ``` ```` and an info word): (FULL, where it ends), (PREFIX, i)
    while the text ends inside it, (NONE, i) when there is none."""
    m = match_literal(text, i, FENCE)
    if m != FULL:
        return m, i
    j, n = i + len(FENCE), len(text)
    while j < n and text[j].isalpha():
        j += 1
        if j - i > len(FENCE) + _MAX_LANG:
            return NONE, i
    return (PREFIX, i) if j == n else (FULL, j)


def match_opener(text: str, i: int) -> Match:
    """After `Action:` and whitespace: an optional fence, then a list of call objects."""
    m, j = _fence_end(text, i)
    if m == PREFIX:
        return PREFIX
    if m == FULL:
        j = skip_ws(text, j)
        if j < 0:
            return NONE
    return list_opener(text, j, KEYS)


# What the reader reads, as data: after `Action:` (and the fence, the family's own), a list (or
# a lone object) of `tool_name` / `parameters` objects, `name` / `arguments` too, a model's
# `tool_call_id` kept. The writer is the family's own (the template indents the list).
FORMAT = CallFormat(JSON_LIST, section=ACTION, sep=", ", name_key="tool_name",
                    name_alt=("name",), args_key="parameters", args_alt=("arguments",),
                    id_key="tool_call_id", single=True)


class CallParser(list_reader(FORMAT)):
    def __init__(self, schemas: dict, stream: bool) -> None:
        super().__init__(schemas, stream)
        self._fenced: bool | None = None  # undecided until the text after `Action:` shows it

    def _prelude(self, eof: bool) -> bool:
        """The fence before the list, if any; the closing fence is then the list's closer."""
        if self._fenced is None:
            if not self._ws():
                return False
            m, j = _fence_end(self._buf, 0)
            if m == PREFIX:
                return False
            self._fenced = m == FULL
            if self._fenced:
                self._eat(j)
                self.closers = (FENCE,)
        return True


__all__ = ["ACTION", "MARKERS", "NAME", "CallParser", "match_opener"]


def _write_call(call, index: int) -> str:
    """As the template writes a call: `tojson(indent=4)` indented under the object."""
    args = (json.dumps(call.arguments, indent=4, ensure_ascii=False).replace("\n", "\n" + " " * 8)
            if call.arguments else "{}")
    return ("    {\n        \"tool_name\": " + json.dumps(call.name, ensure_ascii=False)
            + ",\n        \"parameters\": " + args + "\n    }")


_OPEN = ACTION + "\n" + FENCE + "json\n[\n"
_SEP = ",\n"
_CLOSE = "\n]" + FENCE


def _grammar_call(w, i: int, fn: dict) -> str:
    """A forced call as GBNF (`w`: engine/grammar/writer.py's Writer)."""
    head = "    {\n        \"tool_name\": " + json.dumps(fn["name"]) + ",\n        \"parameters\": "
    return f"{w.seq(head)} {w.args(i, fn)} {w.seq(chr(10) + '    }')}"


FAMILY = register(Family(
    name=NAME, models="Command R+, Command R (2024 tool-use template)", markers=MARKERS,
    match_opener=match_opener, call_parser=CallParser,
    writer=Writer(_write_call, calls_open=_OPEN, calls_sep=_SEP, calls_close=_CLOSE),
    detect=("directly-answer", "<|CHATBOT_TOKEN|>"), stops=(TURN_END,),
    thinking=False, pack=None, repairs_history=False,
    tag_forms=(re.escape(ACTION), FENCE + "[A-Za-z]*"),
    grammar=CallGrammar(_grammar_call, open=_OPEN, sep=_SEP, close=_CLOSE),
))
