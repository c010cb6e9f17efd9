"""GigaChat 3.1 (Sber GigaChat3.1-10B-A1.8B and its larger siblings): no reasoning; a call is
written inside the assistant's message after `<|function_call|>`.

Owns GigaChat 3.1's record: its call format (`FORMAT`, a json-object shape after
`<|function_call|>`, whose writer and forced-call grammar come from it) and its stops. The
markers and the reader are GigaChat 3's (engine/parse/families/gigachat3.py, which reads both
versions' openers). Run by whichever thread drives the parser.

    Checking.<|function_call|>{"name": "get_weather", "arguments": {"city": "Paris"}}

then `<|message_sep|>`, which ends every message and so the turn: GigaChat 3.1's stop (where
GigaChat 3 writes its call in a message of its own after it, and so cannot stop there).

Choices where the other servers differ: as GigaChat 3's (one reader for both openers, as
vLLM's and SGLang's GigaChat 3 parsers read both); llama.cpp has a handler for GigaChat 3's
template only and reads 3.1's through its template analyser.
"""

from __future__ import annotations

from engine.parse.families import gigachat3
from engine.parse.families.gigachat3 import (
    FUNCTION_CALL,
    MARKERS,
    MESSAGE_SEP,
    PRESERVED_TOKENS,
    CallParser,
    match_opener,
)
from engine.parse.families.registry import Family, register
from engine.parse.shapes.build import grammar_of, writer_of
from engine.parse.shapes.record import JSON_OBJECT, CallFormat

NAME = "gigachat3.1"

__all__ = ["MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "match_opener"]


FORMAT = CallFormat(JSON_OBJECT, call=FUNCTION_CALL)


FAMILY = register(Family(
    name=NAME, models="GigaChat 3.1 (GigaChat3.1-10B-A1.8B)", markers=MARKERS,
    match_opener=match_opener, call_parser=CallParser,
    writer=writer_of(FORMAT, before_calls=""), format=FORMAT,
    detect=(FUNCTION_CALL,), supersedes=(gigachat3.NAME,),
    stops=(MESSAGE_SEP,), preserved_tokens=PRESERVED_TOKENS, thinking=False, pack=NAME,
    grammar=grammar_of(FORMAT, several=False),
))
