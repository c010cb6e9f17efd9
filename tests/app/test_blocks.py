"""app/api/blocks.py: parser events grouped into thinking / text / tool blocks, directly (the
dialect tests reach it through the server). Events come from the real parser on real-shaped
outputs, fed in every chunking, so what is asserted is what a stream would send."""

from __future__ import annotations

import json

import pytest

from app.api.blocks import CLOSE, DELTA, OPEN, TEXT, THINKING, TOOL, Blocks, Step, blocks_of
from engine.parse.events import Event
from engine.parse.parser import OutputParser
from tests.app.conftest import TOOLS, xml_call


def events_of(raw: str, *, start: str = "reasoning", chunk: int = 0,
              stream_tools: bool = True) -> list[Event]:
    p = OutputParser(start=start, family="qwen-xml", tools=tuple(TOOLS),
                     stream_tools=stream_tools)
    evs: list[Event] = []
    size = chunk or len(raw) or 1
    for i in range(0, len(raw), size):
        evs += p.feed(raw[i:i + size])
    return evs + p.finish()


def steps_of(events: list[Event]) -> list[Step]:
    b = Blocks()
    steps = [s for ev in events for s in b.feed(ev)]
    return steps + b.finish()


CALL = xml_call("get_weather", city="Paris", days=2)
RAW = f"Let me check.\n</think>\n\nSure.\n{CALL}\nDone."


@pytest.mark.parametrize("chunk", [0, 1, 3, 7])
def test_blocks_follow_the_channels_in_order(chunk):
    blocks = blocks_of(events_of(RAW, chunk=chunk))
    assert [b.kind for b in blocks] == [THINKING, TEXT, TOOL, TEXT]
    assert [b.position for b in blocks] == [0, 1, 2, 3]
    assert blocks[0].text == "Let me check."
    assert blocks[1].text.startswith("Sure.")
    call = blocks[2]
    assert (call.name, call.complete) == ("get_weather", True)
    assert call.arguments == {"city": "Paris", "days": 2}
    # Streamed argument fragments concatenate to the arguments' JSON.
    assert json.loads(call.text) == call.arguments
    assert blocks[3].text.strip() == "Done."


@pytest.mark.parametrize("chunk", [0, 1, 5])
def test_every_opened_block_is_closed_once_and_deltas_rebuild_its_text(chunk):
    steps = steps_of(events_of(RAW, chunk=chunk))
    opened = [s.block for s in steps if s.op == OPEN]
    closed = [s.block for s in steps if s.op == CLOSE]
    assert [id(b) for b in opened] == [id(b) for b in closed]
    for blk in opened:
        mine = [s for s in steps if s.block is blk]
        assert mine[0].op == OPEN and mine[-1].op == CLOSE
        assert "".join(s.text for s in mine if s.op == DELTA) == blk.text
    # Only one block is open at a time: each open follows the previous block's close.
    depth = 0
    for s in steps:
        depth += {OPEN: 1, CLOSE: -1}.get(s.op, 0)
        assert depth in (0, 1)


def test_a_call_that_arrives_whole_opens_with_all_its_arguments():
    steps = steps_of(events_of(CALL, start="content", stream_tools=False))
    assert [s.op for s in steps] == [OPEN, DELTA, CLOSE]
    blk = steps[0].block
    assert blk.kind == TOOL and blk.complete and blk.name == "get_weather"
    assert json.loads(steps[1].text) == {"city": "Paris", "days": 2}


def test_a_call_given_up_on_is_sent_but_left_out_of_the_final_blocks():
    # The call never closes: the parser streams its start, then returns the text as content.
    raw = "Answer.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPar"
    evs = events_of(raw, start="content", chunk=1)
    b = Blocks()
    steps = [s for ev in evs for s in b.feed(ev)] + b.finish()
    tools = [s.block for s in steps if s.op == OPEN and s.block.kind == TOOL]
    assert tools and not tools[0].complete
    assert all(blk.kind != TOOL for blk in b.final())
    assert "".join(blk.text for blk in b.final() if blk.kind == TEXT).startswith("Answer.")


def test_empty_text_opens_nothing_and_markup_sends_nothing():
    b = Blocks()
    assert b.feed(Event("content", "", (0, 0))) == []
    assert b.feed(Event("markup", "</think>", (0, 8))) == []
    assert b.finish() == []
    assert b.final() == []


def test_a_stray_think_end_never_reaches_a_block():
    blocks = blocks_of(events_of("Hello </think>world", start="content"))
    assert "".join(blk.text for blk in blocks) == "Hello world"
    assert "</think>" not in "".join(blk.text for blk in blocks)
