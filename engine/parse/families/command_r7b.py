"""Command R7B, Command A and Cohere2 (Cohere's special-token format): `<|START_THINKING|>`
reasoning, calls as a JSON list in `<|START_ACTION|>`, the answer in `<|START_RESPONSE|>`.

Owns the family's markers, its record (`FORMAT`, a json-list shape, whose reader,
engine/parse/shapes/json_list.py, reads its calls) and its writer. Run by whichever thread
drives the parser.

    <|START_THINKING|>I need the weather.<|END_THINKING|><|START_ACTION|>[
        {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}
    ]<|END_ACTION|>
    <|START_THINKING|>Simple.<|END_THINKING|><|START_RESPONSE|>Hello!<|END_RESPONSE|>

Each object of the action's list is its own call (engine/parse/shapes/json_list.py), the
last one consuming `]<|END_ACTION|>`. Cohere2's templates (Cohere2MoE.jinja) write the answer
in `<|START_TEXT|>…<|END_TEXT|>` instead: both pairs are markup, never text. The turn ends with
`<|END_OF_TURN_TOKEN|>`. Cohere2's generation prompt opens `<|START_THINKING|>` for the model
(the reply starts in reasoning); R7B's writes `<|START_THINKING|><|END_THINKING|>` unless
`enable_thinking` is set, and the model then opens its reasoning itself. The pack renders
Cohere2MoE.jinja unchanged: R7B's own template writes its generation prompt even when none is
asked for, so the turns it writes never continue its prompts.

Choices where the other servers differ (vLLM has no Cohere parser; llama.cpp's is
`common_chat_parse_command_r7b`; SGLang's gateway has `CohereParser`):
- the model's own `tool_call_id` is the call's id, as llama.cpp keeps it (SGLang's gateway
  drops it), when it comes before `tool_name` as the templates write it, and unless an
  earlier call of the same list has it already; otherwise Prism numbers the call;
- a lone object (`<|START_ACTION|>{...}<|END_ACTION|>`) and the `name` / `arguments` spellings
  are calls too, as SGLang's gateway reads Command A (llama.cpp wants a list of `tool_name` /
  `parameters`);
- the reply is read in any order: text after `<|END_ACTION|>` is answer, and a response may
  precede an action (llama.cpp reads either an action or a response per turn);
- an action at a line start inside the reasoning, with a real call after it, ends the
  reasoning (an implicit end, docs/design.md section 4 rule 3); llama.cpp reads everything
  before `<|END_THINKING|>` as reasoning.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from engine.parse.families.common import Match
from engine.parse.families.registry import CallGrammar, Family, Writer, register
from engine.parse.markers import Markers
from engine.parse.shapes.json_list import list_opener, list_reader
from engine.parse.shapes.record import JSON_LIST, CallFormat

NAME = "command-r7b"
THINK = "<|START_THINKING|>"
THINK_END = "<|END_THINKING|>"
ACTION = "<|START_ACTION|>"
ACTION_END = "<|END_ACTION|>"
RESPONSE = "<|START_RESPONSE|>"
RESPONSE_END = "<|END_RESPONSE|>"
TEXT = "<|START_TEXT|>"  # Cohere2's answer (and every turn's text)
TEXT_END = "<|END_TEXT|>"
TURN_END = "<|END_OF_TURN_TOKEN|>"
KEYS = ("tool_call_id", "tool_name", "name")  # what a call object may begin with

MARKERS = Markers(THINK, THINK_END, (ACTION,), markup=(RESPONSE, RESPONSE_END, TEXT, TEXT_END))
PRESERVED_TOKENS = (THINK, THINK_END, ACTION, ACTION_END, RESPONSE, RESPONSE_END, TEXT,
                    TEXT_END)


def match_opener(text: str, i: int) -> Match:
    """After `<|START_ACTION|>`: a list (or a lone object) whose first key is one of KEYS."""
    return list_opener(text, i, KEYS)


# What the reader reads, as data: a list (or a lone object) of `tool_name` / `parameters`
# objects, `name` / `arguments` too, the model's `tool_call_id` kept. The writer is the
# family's own (the template numbers the calls and indents the list).
FORMAT = CallFormat(JSON_LIST, section=ACTION, section_end=ACTION_END, sep=", ",
                    name_key="tool_name", name_alt=("name",), args_key="parameters",
                    args_alt=("arguments",), id_key="tool_call_id", single=True)
CallParser = list_reader(FORMAT)


__all__ = ["FORMAT", "MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "match_opener"]


@dataclass(frozen=True, slots=True)
class _Writer(Writer):
    """The answer always in `<|START_RESPONSE|>…<|END_RESPONSE|>`, as the model writes it."""

    answer_close: str = ""

    def write_answer(self, text: str, after_reasoning: bool = False) -> str:
        return self.answer_open + text + self.answer_close


def _write_call(call, index: int) -> str:
    # The model numbers its calls ("0", "1", ...): its own id when the call kept one.
    cid = call.id if call.id.isdigit() else str(index)
    return json.dumps({"tool_call_id": cid, "tool_name": call.name,
                       "parameters": call.arguments}, ensure_ascii=False)


_OPEN = ACTION + "[\n    "
_SEP = ",\n    "
_CLOSE = "\n]" + ACTION_END


def _grammar_call(w, i: int, fn: dict) -> str:
    """A forced call as GBNF (`w`: engine/grammar/writer.py's Writer); the id counts the
    conversation's calls, as the templates number them."""
    rest = '", "tool_name": ' + json.dumps(fn["name"]) + ', "parameters": '
    return (f"{w.seq('{' + json.dumps('tool_call_id') + ': ' + chr(34))} [0-9] [0-9]? [0-9]? "
            f"{w.seq(rest)} {w.args(i, fn)} {w.seq('}')}")


FAMILY = register(Family(
    name=NAME, models="Command R7B, Command A, Cohere2 (MoE)", markers=MARKERS,
    match_opener=match_opener, call_parser=CallParser,
    writer=_Writer(_write_call, reasoning_open=THINK, reasoning_close=THINK_END,
                   answer_open=RESPONSE, answer_close=RESPONSE_END, calls_open=_OPEN,
                   calls_sep=_SEP, calls_close=_CLOSE, before_calls=""),
    detect=(ACTION, THINK), supersedes=("command-r-plus",),
    stops=(TURN_END,), never_stops=(THINK_END, ACTION_END, RESPONSE_END, TEXT_END),
    preserved_tokens=PRESERVED_TOKENS, thinking=True, pack=NAME,
    grammar=CallGrammar(_grammar_call, open=_OPEN, sep=_SEP, close=_CLOSE),
))
