"""The tags that the output parser and the chat templates agree on, defined once.

Owns the reasoning and call tags written by the Qwen3 / Hermes families: `<think>` opens the
reasoning, `</think>` ends it, `<tool_call>` opens a call body and `</tool_call>` ends it; and
`Markers`, the shape in which every family (engine/parse/families) names its own tags for the
parser.
The families own what may follow a call opener; the parser (engine/parse/parser.py) and history
repair (engine/chat/template.py) read these names, never the literals. Constants only; any thread
may read them.
"""

from __future__ import annotations

from collections.abc import Callable
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
    lead: tags a family writes at the very start of an answer it opens itself (MiniMax-M3's
        `</mm:think>`, the prefix of a turn that does not think): there, after whitespace and
        only in the answer, consumed as markup, never a stray closer; elsewhere they are what
        they always are.
    lead_ws: whitespace at the very start of the output belongs to the first tag, as the
        newlines before a tag do (Muse Glimmer's ` to=NAME` continues the prompt's
        `<|start|>assistant`): markup or call text with that tag, text only when none follows.
    opened: a call opener the family's prompt ends with (Functionary v3.2's `>>>`): the very
        start of the output is read as if it followed it, without its text (a call, or one of
        the `markup` tags that begin with it, less that opener).
    close_frames: where the closer also ends the family's answer messages (Solar Open's
        `<|end|>`): in the answer it is a message end (markup) when one of these follows it
        (after whitespace) or the output ends there, and a stray closer anywhere else.
    inline_calls: call openers that end the reasoning mid-line too, not only at a line start
        (special tokens a model writes only to call: Kimi K2's section); never when fenced.
    frame: the family's reader of its own message headers, where no literal tag fits them
        (Harmony's `<|channel|> final <|constrain|>json<|message|>`, Gemma 4's doubled
        `<|channel><|channel>thought`): `frame(text, i, eof) -> (Match, end, channel)`, a
        header at text[i:end] that opens `channel` ("reasoning" or "content"), FULL; PREFIX
        while the text ends inside one; NONE. Tried before `markup`, in the reasoning too;
        its headers begin with the first character of another of the family's tags.
    """

    think_open: str | None
    think_close: str | None
    calls: tuple[str, ...]
    markup: tuple[str, ...] = ()
    reopen: bool = False
    body_openers: tuple[str, ...] = ()
    line_calls: tuple[str, ...] = ()
    lead: tuple[str, ...] = ()
    lead_ws: bool = False
    opened: str = ""
    close_frames: tuple[str, ...] = ()
    inline_calls: tuple[str, ...] = ()
    frame: Callable[[str, int, bool], tuple[int, int, str]] | None = None

    def starts(self) -> str:
        """The first characters of every tag the scanner must stop at, once each."""
        tags = [self.think_close, *self.calls, *self.markup]
        if self.reopen:
            tags.append(self.think_open)
        return "".join(dict.fromkeys(t[0] for t in tags if t))


THINK_MARKERS = Markers(THINK_OPEN, THINK_CLOSE, (CALL_OPEN,))
