"""NVIDIA Nemotron Nano v2 (Nemotron-H 9B / 12B v2): `<think>` reasoning and a JSON list of calls
between `<TOOLCALL>` and `</TOOLCALL>`.

Owns the family's markers and record; its call reader is Granite's JSON list reader
(engine/parse/families/granite.py `ListCall`) with `</TOOLCALL>` after the list. Run by whichever
thread drives the parser.

    <think>
    The user wants the weather.
    </think>
    Checking.
    <TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</TOOLCALL>

Each element of the list is its own call (`follow`), read by the Hermes JSON scanner, so an
`arguments` string holding JSON (the template's own example writes `"arguments": "tool_args1"`)
is decoded, and `</TOOLCALL>` inside a string never ends the list. The template opens the
reasoning (`<think>\\n` ends the generation prompt) unless the conversation says `/no_think`,
which writes `<think></think>`; its end of turn is `<SPECIAL_12>`.

Nemotron 3 Nano (NVIDIA-Nemotron-3-Nano-30B-A3B) writes Qwen3-Coder's XML calls
(`<tool_call><function=…>`), not `<TOOLCALL>`: its template carries no `<TOOLCALL>` and stays
detected as qwen-xml. Llama-Nemotron templates write `<TOOLCALL>` lists inside Llama 3 turns:
this family is tried before llama3-json (`supersedes`), so they are read as the lists they are.

Choices where the other servers differ: text after `</TOOLCALL>` is answer (NVIDIA's vLLM plugin
keeps only the text before the list, llama.cpp keeps both); the `<think>` block is reasoning
(vLLM's nemotron_nano_v2 parser leaves it in the content, llama.cpp reads it); a list missing
its `[` or `]` is read (NVIDIA's plugin adds them), the missing `]` counted as a repair ("no
]"); a list complete at the end of output is accepted without `</TOOLCALL>`; an element may name
its arguments first; the calls stream one by one (the plugin does not stream).
"""

from __future__ import annotations

from engine.parse.families.granite import (
    ListCall,
    grammar_json_call,
    list_opener,
    write_json_call,
)
from engine.parse.families.registry import CallGrammar, Family, register, think_writer
from engine.parse.markers import THINK_CLOSE, THINK_OPEN, Markers

NAME = "nemotron-v2"
TOOLCALL = "<TOOLCALL>"
TOOLCALL_END = "</TOOLCALL>"

MARKERS = Markers(THINK_OPEN, THINK_CLOSE, (TOOLCALL,))
PRESERVED_TOKENS = (THINK_OPEN, THINK_CLOSE, TOOLCALL, TOOLCALL_END)

match_opener = list_opener


class CallParser(ListCall):
    CLOSE = TOOLCALL_END


__all__ = ["MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "match_opener"]


FAMILY = register(Family(
    name=NAME, models="NVIDIA Nemotron Nano v2 (9B, 12B), Llama-Nemotron", markers=MARKERS,
    match_opener=match_opener, call_parser=CallParser,
    writer=think_writer(write_json_call, calls_open=TOOLCALL + "[", calls_sep=", ",
                        calls_close="]" + TOOLCALL_END),
    detect=(TOOLCALL,), supersedes=("llama3-json",), stops=("<SPECIAL_12>",),
    preserved_tokens=PRESERVED_TOKENS, thinking=True, pack="nemotron-v2",
    grammar=CallGrammar(grammar_json_call, open=TOOLCALL + "[", sep=", ",
                        close="]" + TOOLCALL_END),
))
