"""GigaChat 3.1 (Sber GigaChat3.1-10B-A1.8B and its larger siblings): no reasoning; a call is
written inside the assistant's message after `<|function_call|>`.

Owns GigaChat 3.1's record: its writer, stops and forced-call grammar. The markers and the
reader are GigaChat 3's (engine/parse/families/gigachat3.py, which reads both versions'
openers). Run by whichever thread drives the parser.

    Checking.<|function_call|>{"name": "get_weather", "arguments": {"city": "Paris"}}

then `<|message_sep|>`, which ends every message and so the turn: GigaChat 3.1's stop (where
GigaChat 3 writes its call in a message of its own after it, and so cannot stop there).

Choices where the other servers differ: as GigaChat 3's (one reader for both openers, as
vLLM's and SGLang's GigaChat 3 parsers read both); llama.cpp has a handler for GigaChat 3's
template only and reads 3.1's through its template analyser.
"""

from __future__ import annotations

import json

from engine.parse.families import gigachat3
from engine.parse.families.gigachat3 import (
    FUNCTION_CALL,
    MARKERS,
    MESSAGE_SEP,
    PRESERVED_TOKENS,
    CallParser,
    match_opener,
)
from engine.parse.families.registry import CallGrammar, Family, Writer, register

NAME = "gigachat3.1"

__all__ = ["MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "match_opener"]


def _write_call(call, index: int) -> str:
    return FUNCTION_CALL + gigachat3._body(call.name, call.arguments)


def _grammar_call(w, i: int, fn: dict) -> str:
    """A forced call as GBNF (`w`: engine/grammar/writer.py's Writer)."""
    head = FUNCTION_CALL + '{"name": ' + json.dumps(fn["name"]) + ', "arguments": '
    return f"{w.seq(head)} {w.args(i, fn)} {w.seq('}')}"


FAMILY = register(Family(
    name=NAME, models="GigaChat 3.1 (GigaChat3.1-10B-A1.8B)", markers=MARKERS,
    match_opener=match_opener, call_parser=CallParser,
    writer=Writer(_write_call, calls_sep="", before_calls=""),
    detect=(FUNCTION_CALL,), supersedes=(gigachat3.NAME,),
    stops=(MESSAGE_SEP,), preserved_tokens=PRESERVED_TOKENS, thinking=False, pack=NAME,
    grammar=CallGrammar(_grammar_call, several=False),
))
