"""GigaChat 3 (Sber GigaChat3-10B-A1.8B and its larger siblings): no reasoning; a call is a
`function call` message of its own after the assistant's.

Owns the family's markers and the reader of one call, shared with GigaChat 3.1
(engine/parse/families/gigachat3_1.py), and GigaChat 3's record (`FORMAT`, a json-object shape,
engine/parse/shapes/json_object.py, whose writer and forced-call grammar its calls use). Run by
whichever thread drives the parser.

Every message is `ROLE<|role_sep|>\\nTEXT<|message_sep|>\\n\\n`; the prompt ends with
`assistant<|role_sep|>\\n`, so the model writes its answer, then for a call ends that message
and writes a `function call` one:

    Checking.<|message_sep|>

    function call<|role_sep|>
    {"name": "get_weather", "arguments": {"city": "Paris"}}

GigaChat 3.1 writes the call inside the assistant's message instead:
`Checking.<|function_call|>{"name": "get_weather", "arguments": {...}}<|message_sep|>`. One
reader serves both: either opener, then a Hermes-style JSON object whose first key is `name`
(read by engine/parse/families/hermes_json.py's scanner, so its arguments stream), ended by
the object's closing brace. `<|message_sep|>` ends a message: markup in the answer. The
templates render one call per turn (the first of the history's `tool_calls`), so a forced
call is one call.

Choices where the other servers differ: `function call<|role_sep|>` is a call only at the start
of a line (after `<|message_sep|>\\n\\n`, as the template writes it), and `<|role_sep|>` is
required (vLLM's regex also takes `function call{` with the special tokens skipped; Prism
keeps them as text); a missing `arguments` key is a call with no arguments, as for Hermes
(SGLang drops the call); GigaChat 3's turn ends with `</s>` only, never with
`<|message_sep|>`, which ends the answer's message before a call (llama.cpp's legacy GigaChat
template and GigaChat 3.1 stop on it).
"""

from __future__ import annotations

from engine.parse.families import hermes_json
from engine.parse.families.registry import Family, register
from engine.parse.markers import Markers
from engine.parse.shapes.build import grammar_of, writer_of
from engine.parse.shapes.record import JSON_OBJECT, CallFormat

NAME = "gigachat3"
ROLE_SEP = "<|role_sep|>"
MESSAGE_SEP = "<|message_sep|>"
FUNCTION_CALL = "<|function_call|>"  # GigaChat 3.1's opener
CALL_ROLE = "function call" + ROLE_SEP  # GigaChat 3's
EOS = "</s>"

MARKERS = Markers(None, None, (CALL_ROLE, FUNCTION_CALL), markup=(MESSAGE_SEP,),
                  line_calls=(CALL_ROLE,))
PRESERVED_TOKENS = (ROLE_SEP, MESSAGE_SEP, FUNCTION_CALL)

match_opener = hermes_json.match_opener  # `{`, whitespace, then `"name"`


class CallParser(hermes_json.CallParser):
    """The Hermes JSON scanner, ended by the object itself: there is no closing tag (what
    follows, `<|message_sep|>` or the answer, is the channel's again)."""

    def _after(self, ch: str) -> bool:
        self.done, self.end = True, self._obj_end
        return True


__all__ = ["MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "match_opener"]


# The calls' syntax as data, for the writer and the forced-call grammar: the answer's message
# ends, and a `function call` message holds the call object.
FORMAT = CallFormat(JSON_OBJECT, section=MESSAGE_SEP + "\n\n", call=CALL_ROLE + "\n",
                    sep=MESSAGE_SEP + "\n\n")


FAMILY = register(Family(
    name=NAME, models="GigaChat 3 (GigaChat3-10B-A1.8B)", markers=MARKERS,
    match_opener=match_opener, call_parser=CallParser,
    writer=writer_of(FORMAT, before_calls=""),
    detect=(ROLE_SEP,), stops=(EOS,), never_stops=(MESSAGE_SEP,),
    preserved_tokens=PRESERVED_TOKENS, thinking=False, pack=NAME,
    grammar=grammar_of(FORMAT, several=False),
))
