"""The tags that the output parser and the chat templates agree on, defined once.

Owns the reasoning and call tags written by the Qwen3 / Hermes families: `<think>` opens the
reasoning, `</think>` ends it, `<tool_call>` opens a call body and `</tool_call>` ends it; and
`Markers`, the shape in which every family (engine/dialects) names its own tags for the parser.
The dialects own what may follow a call opener; the parser (engine/parse/parser.py) and history
repair (engine/chat/template.py) read these names, never the literals. Constants only; any thread
may read them.
"""

from __future__ import annotations

from dataclasses import dataclass

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"


@dataclass(frozen=True, slots=True)
class Markers:
    """One family's tags, as the parser's text scanner reads them (docs/design.md, section 4).

    think_open / think_close: the reasoning block's opener and closer (None: the family has no
        reasoning). The opener is consumed at the very start of the output (rule 1); the closer
        ends the reasoning (rule 2) and is a stray closer in the answer (rule 5).
    calls: the openers of a call (a section opener such as `<tool_call>`, or a per-call one);
        each counts only when the family's `match_opener` accepts what follows (rules 3, 4).
    markup: tags consumed as markup in the answer, never text and never stray (Harmony's
        message frame). A closer listed here is a message end in the answer, not a stray one.
    reopen: the reasoning opener may also appear later in the answer, re-entering reasoning
        (Harmony's analysis channel after a preamble).
    body_openers: call openers that are the body's own first characters (Llama's bare `{`):
        the body reader gets them too.
    line_calls: call openers that count only at the start of a line, in the answer too (a bare
        JSON object mid-sentence is prose).
    """

    think_open: str | None
    think_close: str | None
    calls: tuple[str, ...]
    markup: tuple[str, ...] = ()
    reopen: bool = False
    body_openers: tuple[str, ...] = ()
    line_calls: tuple[str, ...] = ()

    def starts(self) -> str:
        """The first characters of every tag the scanner must stop at, once each."""
        tags = [self.think_close, *self.calls, *self.markup]
        if self.reopen:
            tags.append(self.think_open)
        return "".join(dict.fromkeys(t[0] for t in tags if t))


THINK_MARKERS = Markers(THINK_OPEN, THINK_CLOSE, (CALL_OPEN,))
