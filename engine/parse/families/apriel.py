"""Apriel 1.5 / 1.6 Thinker (ServiceNow): untagged reasoning that ends at
`[BEGIN FINAL RESPONSE]`, calls as a JSON list in `<tool_calls>`.

Owns the family's record (`FORMAT`, a json-list shape in `<tool_calls>`, also read in
`<tool_call>`: reader, writer and forced-call grammar come from it,
engine/parse/shapes/json_list.py). Run by whichever thread drives the parser.

    Here are my reasoning steps:
    The user wants the weather in Paris.
    [BEGIN FINAL RESPONSE]
    Let me check.
    <tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_calls>

The reasoning has no opening tag of its own: Apriel 1.5 begins every reply with "Here are my
reasoning steps:" (consumed as its opener at the start of the output), Apriel 1.6's template
writes it as the generation prompt (the reply starts in reasoning). `[BEGIN FINAL RESPONSE]`
(one token of Apriel's vocabulary, as vLLM reads it) ends the reasoning; `[END FINAL
RESPONSE]`, which 1.5 writes after its answer, is markup. Each object of the list is its own
call (engine/parse/shapes/json_list.py), the last one consuming `]</tool_calls>`. The turn
ends with `<|end|>`.

Detected by `[BEGIN FINAL RESPONSE]`, in both Apriel templates and in no other (MiniMax-M1's
calls are also in `<tool_calls>`, one object per line: its template never writes this
marker, and Apriel's never write M1's own, `<beginning_of_sentence>`).

Choices where the other servers differ:
- the reasoning ends at `[BEGIN FINAL RESPONSE]`, as vLLM's `apriel` reasoning parser reads it;
  llama.cpp's Apriel 1.5 handler reads `<thinking>…</thinking>` instead (what the template
  writes in the history when a caller sets `add_thoughts`), which the model does not write;
- a reply whose prompt did not open the reasoning and that does not begin with "Here are my
  reasoning steps:" is read as an answer (vLLM reads everything before `[BEGIN FINAL RESPONSE]`
  as reasoning; here that marker is then a stray closer, dropped and counted);
- `<tool_call>` / `</tool_call>` (which the 1.5 template's instructions name, while its example
  writes `<tool_calls>`) frame calls too, and a lone object stands for a list of one; vLLM and
  llama.cpp read only `<tool_calls>[...]`;
- an `"id"` the model writes in a call (after its arguments, as the template's history does) is
  not kept: Prism numbers the calls, as vLLM does;
- `[END FINAL RESPONSE]` is markup and what follows it is still answer (vLLM cuts the answer
  there, or at `<|end|>`, and drops the rest).
"""

from __future__ import annotations

from engine.parse.families.registry import register
from engine.parse.shapes.build import shape_family
from engine.parse.shapes.record import JSON_LIST, CallFormat

NAME = "apriel"
REASONING = "Here are my reasoning steps:"
FINAL = "[BEGIN FINAL RESPONSE]"
FINAL_END = "[END FINAL RESPONSE]"
CALLS = "<tool_calls>"
CALLS_END = "</tool_calls>"
CALL = "<tool_call>"  # the 1.5 template's instructions name these
CALL_END = "</tool_call>"
TURN_END = "<|end|>"

FORMAT = CallFormat(JSON_LIST, section=CALLS, section_end=CALLS_END, sep=", ", single=True,
                    also=(CallFormat(JSON_LIST, section=CALL, section_end=CALL_END,
                                     single=True),))
PRESERVED_TOKENS = (FINAL, FINAL_END, CALLS, CALLS_END, CALL, CALL_END)

FAMILY = register(shape_family(
    FORMAT, name=NAME, models="Apriel 1.5 / 1.6 Thinker", reasoning=(REASONING, FINAL),
    writer={"reasoning_open": REASONING + "\n", "reasoning_close": "\n" + FINAL + "\n"},
    markers={"markup": (FINAL_END,)},
    detect=(FINAL,), stops=(TURN_END,), never_stops=(FINAL, FINAL_END),
    preserved_tokens=PRESERVED_TOKENS, thinking=True, pack=NAME,
))
MARKERS, CallParser, match_opener = FAMILY.markers, FAMILY.call_parser, FAMILY.match_opener
