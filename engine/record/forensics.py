"""Cache forensics: where a request's prompt left the best cached prefix, in terms of its
messages (issue 20, part 2).

Owns `PromptPlace` (a message and a character in it), `message_spans` and `locate` (a char
offset of the rendered prompt to its place), `prompt_offset` (the engine's char offset moved
onto the rendered prompt), `needs_report` and `miss_line` (the service's log line),
`reuse_cell`, `reuse_text` and `miss_tip` (the window's texts), and `prefix_to_dict` /
`prefix_from_dict` (the recording's form of a `PrefixMatch`). Pure text work, on the caller's
thread: the engine thread for the service's log line, the GUI thread for the
prompt view and the request list.

Why: a client that reorders its system reminders, or a timestamp in the system prompt, makes
the cache reuse nothing past that point, silently. The llama engine reports the char offset,
in the prompt's text, of the first token that differs from what the best cache held
(`Finish.prefix`); a developer needs "message 0 (system), char 57" and the two texts.

Finding each message in the rendered prompt (`message_spans`), two ways, as
engine/chat/special.py does for special tokens:
- with `render` (the service has the pack's template): the messages are rendered again with
  each text replaced by a private-use marker; where the result, texts put back, equals the
  prompt, the markers give exact spans. One extra render, so the service does it only for a
  request it reports.
- without (the window, a recording): each message's text (then its stripped text) is searched
  in the prompt after the previous message's. Its limits: a template that rewrites a text
  (drops an old turn's thinking, re-serializes tool calls) leaves that field unfound, and the
  place falls to the template text around it; a text that also occurs in the template text
  before it (an empty-looking "\\n") could be found too early. It never attributes a char
  after a found message to an earlier one.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.backends.base import PrefixMatch, Timings
from engine.chat.request import ChatRequest, Message

# A prompt this long is worth a log line when most of it was recomputed (issue 20).
LONG_PROMPT_TOKENS = 1024
# How far (chars) `prompt_offset` looks for the differing text around the engine's offset: a
# BOS the tokenizer added, which the rendered prompt does not write, shifts it by a few.
_ALIGN_WINDOW = 64
_SHOWN = 48  # chars of each text a log line shows
_MARK = re.compile("\ue000(\\d+)([cr])\ue001")


@dataclass(frozen=True, slots=True)
class PromptPlace:
    """Where a char of the rendered prompt lies. `message` is the index of the message it
    belongs to (len(messages): after the last one, in the generation prompt); `field` is
    "content" or "reasoning" when the char lies in that text, at `char` within it, or ""
    when it lies in the template's text before that message's text (its header, the previous
    turn's end, the tools) and `char` is then 0. `role` is the message's role ("" past the
    last)."""

    message: int
    char: int = 0
    field: str = ""
    role: str = ""

    def describe(self) -> str:
        who = f"message {self.message}" + (f" ({self.role})" if self.role else "")
        if self.field == "content":
            return f"{who}, char {self.char}"
        if self.field == "reasoning":
            return f"{who}, char {self.char} of its reasoning"
        if not self.role:
            return "the template's text after the last message"
        return f"the template's text before {who}"


def messages_of(request: ChatRequest | dict | None) -> tuple[Message, ...]:
    """A live request's messages, or a recorded request dict's (role and texts only)."""
    if request is None:
        return ()
    if isinstance(request, ChatRequest):
        return request.messages
    return tuple(Message(role=str(m.get("role", "")), content=str(m.get("content") or ""),
                         reasoning_content=m.get("reasoning_content"))
                 for m in request.get("messages") or () if isinstance(m, dict))


Span = tuple[str, int, int]  # (field, start, end) in the prompt


def _fields(m: Message) -> list[tuple[str, str]]:
    out = [("c", m.content)] if m.content else []
    if m.reasoning_content:
        out.append(("r", m.reasoning_content))
    return out


def message_spans(prompt: str, messages: Sequence[Message],
                  render: Callable[[tuple[Message, ...]], str] | None = None
                  ) -> tuple[tuple[Span, ...], ...]:
    """Per message, the spans of its texts in `prompt` (see the module docstring)."""
    if render is not None:
        spans = _by_markers(prompt, messages, render)
        if spans is not None:
            return spans
    return _by_search(prompt, messages)


def _by_markers(prompt, messages, render) -> tuple[tuple[Span, ...], ...] | None:
    marked = tuple(
        dataclasses.replace(
            m, content=f"\ue000{i}c\ue001" if m.content else m.content,
            reasoning_content=f"\ue000{i}r\ue001" if m.reasoning_content
            else m.reasoning_content)
        for i, m in enumerate(messages))
    try:
        text = render(marked)
    except Exception:  # the template refused the markers (it inspects the text)
        return None
    out: list[list[Span]] = [[] for _ in messages]
    rebuilt, size, pos = [], 0, 0
    for m in _MARK.finditer(text):
        i, which = int(m.group(1)), m.group(2)
        if i >= len(messages):
            return None
        value = messages[i].content if which == "c" else messages[i].reasoning_content or ""
        rebuilt.append(text[pos:m.start()])
        size += m.start() - pos
        out[i].append(("content" if which == "c" else "reasoning", size, size + len(value)))
        rebuilt.append(value)
        size += len(value)
        pos = m.end()
    rebuilt.append(text[pos:])
    if "".join(rebuilt) != prompt:
        return None
    return tuple(tuple(sorted(s, key=lambda s: s[1])) for s in out)


def _by_search(prompt: str, messages: Sequence[Message]) -> tuple[tuple[Span, ...], ...]:
    out: list[tuple[Span, ...]] = []
    pos = 0
    for m in messages:
        found: list[Span] = []
        end = pos
        # Templates write a turn's thinking before its answer: look for it first.
        for which, value in sorted(_fields(m), key=lambda f: f[0] != "r"):
            for candidate in (value, value.strip()):
                at = prompt.find(candidate, pos) if candidate else -1
                if at >= 0:
                    found.append(("content" if which == "c" else "reasoning", at,
                                  at + len(candidate)))
                    end = max(end, at + len(candidate))
                    break
        pos = end
        out.append(tuple(sorted(found, key=lambda s: s[1])))
    return tuple(out)


def locate(prompt: str, messages: Sequence[Message], char: int,
           render: Callable[[tuple[Message, ...]], str] | None = None) -> PromptPlace:
    """The place of `prompt[char]` among the messages. A char belongs to the first message
    whose texts end after it; inside one of them it is that text's char, else it lies in the
    template's text before it."""
    spans = message_spans(prompt, messages, render)
    for i, own in enumerate(spans):
        for field, start, end in own:
            if start <= char < end:
                return PromptPlace(i, char - start, field, messages[i].role)
            if char < start:
                return PromptPlace(i, 0, "", messages[i].role)
    # Past every text found: a message none of whose texts was found, or the generation prompt.
    last = max((i for i, own in enumerate(spans) if own), default=-1)
    if last + 1 < len(messages):
        return PromptPlace(last + 1, 0, "", messages[last + 1].role)
    return PromptPlace(len(messages))


def prompt_offset(prompt: str, prefix: PrefixMatch) -> int:
    """`prefix.prompt_char` as an offset in `prompt` (the rendered text). The engine counts in
    its detokenized text, which can differ from the rendered one by a token it added (a BOS);
    where the prompt does not have `prompt_text` there, the nearest place within a few chars
    that does is taken. Always within 0..len(prompt)."""
    at = min(max(prefix.prompt_char, 0), len(prompt))
    head = prefix.prompt_text[:16]
    if len(head) < 4 or prompt.startswith(head, at):
        return at
    lo, hi = max(at - _ALIGN_WINDOW, 0), min(at + _ALIGN_WINDOW + len(head), len(prompt))
    found, pos = [], prompt.find(head, lo, hi)
    while pos >= 0:
        found.append(pos)
        pos = prompt.find(head, pos + 1, hi)
    return min(found, key=lambda p: abs(p - at)) if found else at


def needs_report(timings: Timings, prefix: PrefixMatch | None) -> bool:
    """Whether a request's cache miss is worth a log line: a long prompt, more than half of it
    recomputed, although some cache held a longer prefix than was reused."""
    return (prefix is not None and timings.prompt_tokens >= LONG_PROMPT_TOKENS
            and timings.computed_tokens * 2 > timings.prompt_tokens
            and prefix.held > timings.cached_tokens)


def shown(text: str, n: int = _SHOWN) -> str:
    """A text trimmed for one line, its newlines written as \\n, quoted."""
    one = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return '"' + (one[:n] + "…" if len(one) > n else one) + '"'


def miss_line(id: str, timings: Timings, prefix: PrefixMatch, place: PromptPlace) -> str:
    """The log line for a reported miss (see `needs_report`)."""
    where = prefix.source or "a cache"
    return (f"[prism] {id}: cache miss: {timings.computed_tokens} of {timings.prompt_tokens} "
            f"prompt tokens recomputed although {where} held {prefix.held}; the prompt left it "
            f"at {place.describe()}: cache had {shown(prefix.cached_text)}, prompt has "
            f"{shown(prefix.prompt_text)}")


def reuse_cell(timings: Timings | None) -> str:
    """A request list cell: reused / prompt tokens ("7012/7379"), "" before the finish."""
    if timings is None or not timings.prompt_tokens:
        return ""
    return f"{timings.cached_tokens}/{timings.prompt_tokens}"


def reuse_text(timings: Timings) -> str:
    """Where a finished prompt's tokens came from, in one line."""
    return (f"{timings.cached_tokens} of {timings.prompt_tokens} prompt tokens reused "
            f"(slot {timings.slot_tokens}, disk {timings.disk_tokens}), "
            f"{timings.computed_tokens} computed")


def miss_tip(timings: Timings | None, prefix: PrefixMatch | None,
             place: PromptPlace | None) -> str:
    """The tooltip of a request's cache figures: where its tokens came from and, with the
    engine's prefix match, where the prompt left the best cached prefix and the two texts."""
    lines = [reuse_text(timings)] if timings is not None and timings.prompt_tokens else []
    if prefix is not None and prefix.source:
        where = f" at {place.describe()}" if place is not None else ""
        lines.append(f"The best cache ({prefix.source}) held {prefix.held} tokens of this "
                     f"prompt; the prompt left it{where}.")
        lines.append(f"cache had:  {shown(prefix.cached_text, 80)}")
        lines.append(f"prompt has: {shown(prefix.prompt_text, 80)}")
    elif prefix is not None:
        lines.append("No cache shared a token with this prompt.")
    return "\n".join(lines)


def prefix_to_dict(p: PrefixMatch) -> dict:
    return {f.name: getattr(p, f.name) for f in dataclasses.fields(PrefixMatch)}


def prefix_from_dict(d: object) -> PrefixMatch | None:
    """A recorded prefix match; None for a record without one (older files, other engines)."""
    if not isinstance(d, dict):
        return None
    return PrefixMatch(held=int(d.get("held", 0)), source=str(d.get("source", "")),
                       prompt_char=int(d.get("prompt_char", 0)),
                       cached_text=str(d.get("cached_text", "")),
                       prompt_text=str(d.get("prompt_text", "")))
