"""The tags that the output parser and the chat templates agree on, defined once.

Owns the reasoning and call tags written by the Qwen3 / Hermes families: `<think>` opens the
reasoning, `</think>` ends it, `<tool_call>` opens a call body and `</tool_call>` ends it. The
dialects own what may follow `<tool_call>` (engine/dialects); the parser (engine/parser.py) and
history repair (engine/template.py) read these names, never the literals. Constants only; any
thread may read them.
"""

from __future__ import annotations

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
