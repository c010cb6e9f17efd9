"""Kimi K2 and K2-Thinking: `<think>` reasoning and calls framed by Kimi's section tokens.

Owns the family's record (a name-json `CallFormat`, engine/parse/shapes/name_json.py, which
reads, writes and forces its calls) and its markers. Run by whichever thread drives the parser.

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
    <|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

(without the line break). The call's id is `functions.NAME:INDEX`; the name is what lies
between the `functions.` prefix (optional) and the `:INDEX` suffix (optional). Several calls
share one section: each `<|tool_call_begin|>` is read as its own call, and the section's end is
consumed by the call before it.

K2-Thinking writes its calls right after its reasoning, on the same line: `<think>I need the
weather<|tool_calls_section_begin|>...` without `</think>` (Kimi-K2-Thinking.jinja renders a
turn as `<think>...</think>` then the section, no newline between). The section's tokens are
special tokens the model writes only to call, so they end the reasoning mid-line too
(`Markers.inline_calls`; vLLM's kimi_k2 reasoning parser ends it at the section token wherever
it stands, llama.cpp's tests/test-chat.cpp has a call "*inside thinking block*"), where other
families' openers count only at a line start. A fenced one stays reasoning.

Choices where the other servers differ: `<|tool_call_section_begin|>` (singular, which some K2
outputs write) opens a section too, as in vLLM; a `<|tool_call_begin|>` outside a section is a
call when an id and `<|tool_call_argument_begin|>` follow; the model's own id
(`functions.NAME:IDX`) is kept as the call's id, and written back as it came.
"""

from __future__ import annotations

from engine.parse.families.registry import register
from engine.parse.markers import THINK_CLOSE, THINK_OPEN
from engine.parse.shapes.build import THINK, shape_family
from engine.parse.shapes.name_json import name_of as _name_of
from engine.parse.shapes.record import NAME_JSON, CallFormat

NAME = "kimi-k2"
SECTION = "<|tool_calls_section_begin|>"
SECTION_ALT = "<|tool_call_section_begin|>"
CALL = "<|tool_call_begin|>"
ARG = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
SECTION_END = "<|tool_calls_section_end|>"
SECTION_END_ALT = "<|tool_call_section_end|>"
PREFIX, INDEX = "functions.", ":"

FORMAT = CallFormat(NAME_JSON, section=SECTION, section_end=SECTION_END, call=CALL,
                    name_prefix=PREFIX, index=INDEX, name_end=ARG, call_end=CALL_END,
                    also=(CallFormat(NAME_JSON, section=SECTION_ALT,
                                     section_end=SECTION_END_ALT, call=CALL, name_end=ARG,
                                     call_end=CALL_END),))
PRESERVED_TOKENS = (THINK_OPEN, THINK_CLOSE, SECTION, SECTION_ALT, CALL, ARG, CALL_END,
                    SECTION_END, SECTION_END_ALT)


def name_of(call_id: str) -> str:
    """`functions.get_weather:0` -> `get_weather`."""
    return _name_of(PREFIX, INDEX, call_id)


FAMILY = register(shape_family(
    FORMAT, name=NAME, models="Kimi K2, K2-Thinking", reasoning=THINK,
    markers={"inline_calls": (SECTION, SECTION_ALT, CALL)},
    detect=(SECTION, "<|im_middle|>"), stops=("<|im_end|>",),
    preserved_tokens=PRESERVED_TOKENS, thinking=True, pack="kimi-k2",
))
MARKERS, match_opener, CallParser = FAMILY.markers, FAMILY.match_opener, FAMILY.call_parser

__all__ = ["FORMAT", "MARKERS", "NAME", "PRESERVED_TOKENS", "CallParser", "match_opener",
           "name_of"]
