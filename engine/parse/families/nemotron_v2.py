"""NVIDIA Nemotron Nano v2 (Nemotron-H 9B / 12B v2): `<think>` reasoning and a JSON list of calls
between `<TOOLCALL>` and `</TOOLCALL>`.

Owns the family's record (`FORMAT`, a json-list shape read as Granite's is, with `</TOOLCALL>`
after the list: reader, writer and forced-call grammar come from it,
engine/parse/shapes/json_list.py). Run by whichever thread drives the parser.

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

from engine.parse.families.registry import register
from engine.parse.markers import THINK_CLOSE, THINK_OPEN
from engine.parse.shapes.build import THINK, shape_family
from engine.parse.shapes.record import JSON_LIST, CallFormat

NAME = "nemotron-v2"
TOOLCALL = "<TOOLCALL>"
TOOLCALL_END = "</TOOLCALL>"

FORMAT = CallFormat(JSON_LIST, section=TOOLCALL, section_end=TOOLCALL_END, sep=", ",
                    single=True, repair_close=True)
PRESERVED_TOKENS = (THINK_OPEN, THINK_CLOSE, TOOLCALL, TOOLCALL_END)

FAMILY = register(shape_family(
    FORMAT, name=NAME, models="NVIDIA Nemotron Nano v2 (9B, 12B), Llama-Nemotron",
    reasoning=THINK, detect=(TOOLCALL,), supersedes=("llama3-json",), stops=("<SPECIAL_12>",),
    preserved_tokens=PRESERVED_TOKENS, thinking=True, pack="nemotron-v2",
))
MARKERS, CallParser, match_opener = FAMILY.markers, FAMILY.call_parser, FAMILY.match_opener
