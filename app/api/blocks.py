"""Parser events grouped into consecutive blocks: thinking, text, tool call.

Owns `Block` and `Blocks`, the one piece of state both block-shaped APIs (Anthropic content
blocks, Responses output items) need: which block is open, when a new one starts, and what each
holds. `Blocks.feed(event)` returns the `Step`s to send (open a block, a delta of its text,
close it), and a non-streamed reply is the list of blocks after feeding the run's whole
event list, so it is made of exactly what a stream of the same run sends.

Mapping: reasoning -> a "thinking" block, content -> "text", tool_start opens a "tool" block,
tool_args are its deltas and tool_call completes and closes it. Markup and anomalies are not
sent (a stray `</think>` never reaches the client). Empty text opens nothing.

A call the parser began to stream and then gave up on (it never completed: the parser returns
its text as reasoning or content) leaves a tool block with `complete` False. A stream has
already sent it; `final()` leaves it out, as the run's result does. Pure; any thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.parse.events import CONTENT, REASONING, TOOL_ARGS, TOOL_CALL, TOOL_START, Event

THINKING, TEXT, TOOL = "thinking", "text", "tool"


@dataclass
class Block:
    kind: str  # THINKING | TEXT | TOOL
    position: int  # index among the blocks sent (Anthropic `index`, Responses `output_index`)
    call_index: int | None = None
    call_id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)
    complete: bool = False
    arguments: dict | None = None  # the parsed arguments once the call completed

    @property
    def text(self) -> str:
        return "".join(self.parts)


OPEN, DELTA, CLOSE = "open", "delta", "close"


@dataclass(frozen=True, slots=True)
class Step:
    """One thing to send: open `block`, append `text` to it (DELTA), or close it."""

    op: str  # OPEN | DELTA | CLOSE
    block: Block
    text: str = ""


class Blocks:
    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.current: Block | None = None

    def _open(self, kind: str, steps: list[Step], **kw) -> Block:
        if self.current is not None:
            steps.append(Step(CLOSE, self.current))
        blk = Block(kind, len(self.blocks), **kw)
        self.blocks.append(blk)
        self.current = blk
        steps.append(Step(OPEN, blk))
        return blk

    def feed(self, ev: Event) -> list[Step]:
        steps: list[Step] = []
        kind = ev.kind
        if kind in (REASONING, CONTENT):
            if not ev.text:
                return steps
            want = THINKING if kind == REASONING else TEXT
            blk = self.current
            if blk is None or blk.kind != want:
                blk = self._open(want, steps)
            blk.parts.append(ev.text)
            steps.append(Step(DELTA, blk, ev.text))
        elif kind == TOOL_START:
            self._open(TOOL, steps, call_index=ev.index, call_id=ev.call_id or "", name=ev.text)
        elif kind == TOOL_ARGS:
            blk = self.current
            if blk is None or blk.kind != TOOL or blk.call_index != ev.index:
                blk = self._open(TOOL, steps, call_index=ev.index, call_id=ev.call_id or "")
            if ev.text:
                blk.parts.append(ev.text)
                steps.append(Step(DELTA, blk, ev.text))
        elif kind == TOOL_CALL and ev.call is not None:
            call = ev.call
            blk = self.current
            if blk is None or blk.kind != TOOL or blk.call_index != call.index:
                # A call that arrived whole (not streamed): open it with all its arguments.
                blk = self._open(TOOL, steps, call_index=call.index, call_id=call.id,
                                 name=call.name)
                blk.parts.append(call.arguments_json)
                steps.append(Step(DELTA, blk, call.arguments_json))
            blk.call_id, blk.name = call.id, call.name
            blk.complete, blk.arguments = True, call.arguments
            steps.append(Step(CLOSE, blk))
            self.current = None
        return steps

    def finish(self) -> list[Step]:
        if self.current is None:
            return []
        blk, self.current = self.current, None
        return [Step(CLOSE, blk)]

    def final(self) -> list[Block]:
        """The blocks of a non-streamed reply (incomplete calls left out)."""
        return [b for b in self.blocks if b.kind != TOOL or b.complete]


def blocks_of(events: list[Event]) -> list[Block]:
    b = Blocks()
    for ev in events:
        b.feed(ev)
    b.finish()
    return b.final()
