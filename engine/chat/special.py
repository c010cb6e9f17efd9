"""Special tokens that came from message content rather than from the chat template.

Owns `mark(prompt, messages, render, specials, escape)` -> `PromptMarks`: where each message's
text lies in the rendered prompt, and which special tokens (`<|im_start|>`, `<|im_end|>`, ...)
lie inside those spans. Pure text work on the caller's thread (the service's worker thread for
the server). Issue 10, item 2; docs/design.md, section "Hardening".

Why: a user who types `<|im_start|>system` in a message gets a real role switch, because the
prompt is tokenized with special tokens parsed. The service counts the anomaly
`special_token_in_content`, records the spans, and the prompt view marks them. With
`--escape-special` the content spans are tokenized as plain text instead
(engine/backends/llama/vocab.py), so such a marker is just characters.

Finding the spans: the template is rendered a second time with every message text replaced by
a private-use marker; the markers' positions, with the texts put back, give exact spans when
the result equals the real prompt (the template copied the texts verbatim). A template that
transforms text (trims it, rewrites an old turn's thinking) falls back to searching each text
in turn in the prompt, which can only miss spans, never invent them inside template text it
searched past.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from engine.chat.request import Message

MAX_MARKS = 1000  # spans kept per request; the count is always exact

# Used when the engine knows no vocabulary (a replay): the shapes control tokens take in the
# model families Prism ships (ChatML, Llama 3, Gemma). The live engine gives the real list.
FALLBACK = re.compile(r"<\|[^|<>\s]{1,40}\|>|<(?:start_of_turn|end_of_turn)>")

_MARK = re.compile("\ue000(\\d+)([cr])\ue001")


@dataclass(frozen=True, slots=True)
class PromptMarks:
    """Message text in a rendered prompt: `spans` (start, end) of every text the messages
    brought, `specials` (start, end) of the special tokens inside them (at most MAX_MARKS),
    `n_specials` their exact count, `escaped` whether they were tokenized as plain text."""

    spans: tuple[tuple[int, int], ...] = ()
    specials: tuple[tuple[int, int], ...] = ()
    n_specials: int = 0
    escaped: bool = False

    def texts(self, prompt: str, limit: int = 5) -> list[str]:
        """The first special tokens found, as written (for a log line)."""
        return [prompt[a:b] for a, b in self.specials[:limit]]


NONE = PromptMarks()


def special_pattern(texts: Iterable[str] | None) -> re.Pattern:
    """One regex over the vocabulary's special-token texts, longest first (as llama.cpp
    matches them); FALLBACK when the engine gives none."""
    alts = sorted({t for t in texts or () if t}, key=len, reverse=True)
    return re.compile("|".join(map(re.escape, alts))) if alts else FALLBACK


def _fields(m: Message) -> list[tuple[str, str]]:
    out = [("c", m.content)] if m.content else []
    if m.reasoning_content:
        out.append(("r", m.reasoning_content))
    return out


def content_spans(prompt: str, messages: Sequence[Message],
                  render: Callable[[tuple[Message, ...]], str] | None = None
                  ) -> tuple[tuple[int, int], ...]:
    """Where the messages' texts (content and reasoning) lie in `prompt`."""
    if render is not None:
        spans = _by_markers(prompt, messages, render)
        if spans is not None:
            return spans
    return _by_search(prompt, messages)


def _by_markers(prompt, messages, render) -> tuple[tuple[int, int], ...] | None:
    marked = tuple(
        dataclasses.replace(
            m, content=f"\ue000{i}c\ue001" if m.content else m.content,
            reasoning_content=f"\ue000{i}r\ue001" if m.reasoning_content else
            m.reasoning_content)
        for i, m in enumerate(messages))
    try:
        text = render(marked)
    except Exception:  # the template refused the markers (it inspects the text)
        return None
    out: list[str] = []
    size = 0
    pos = 0
    spans = []
    for m in _MARK.finditer(text):
        i, which = int(m.group(1)), m.group(2)
        if i >= len(messages):
            return None
        value = messages[i].content if which == "c" else messages[i].reasoning_content or ""
        out.append(text[pos:m.start()])
        size += m.start() - pos
        spans.append((size, size + len(value)))
        out.append(value)
        size += len(value)
        pos = m.end()
    out.append(text[pos:])
    if "".join(out) != prompt:
        return None
    return tuple(spans)


def _by_search(prompt: str, messages: Sequence[Message]) -> tuple[tuple[int, int], ...]:
    spans = []
    pos = 0
    for m in messages:
        end = pos
        for _, value in _fields(m):
            for candidate in (value, value.strip()):
                at = prompt.find(candidate, pos) if candidate else -1
                if at >= 0:
                    spans.append((at, at + len(candidate)))
                    end = max(end, at + len(candidate))
                    break
        pos = end
    return tuple(sorted(spans))


def find_specials(prompt: str, spans: Sequence[tuple[int, int]],
                  pattern: re.Pattern) -> tuple[tuple[tuple[int, int], ...], int]:
    """(the first MAX_MARKS special-token spans inside `spans`, how many there are)."""
    found: list[tuple[int, int]] = []
    n = 0
    for start, end in spans:
        for m in pattern.finditer(prompt, start, end):
            n += 1
            if len(found) < MAX_MARKS:
                found.append(m.span())
    return tuple(found), n


def mark(prompt: str, messages: Sequence[Message],
         render: Callable[[tuple[Message, ...]], str] | None,
         specials: Iterable[str] | None, escape: bool = False) -> PromptMarks:
    """The marks of one rendered prompt. Cheap when no message holds anything that looks like
    a special token: the spans are only looked for then."""
    pattern = special_pattern(specials)
    if not any(pattern.search(value) for m in messages for _, value in _fields(m)):
        return NONE
    spans = content_spans(prompt, messages, render)
    found, n = find_specials(prompt, spans, pattern)
    return PromptMarks(spans=spans, specials=found, n_specials=n, escaped=escape)
