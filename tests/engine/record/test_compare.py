"""engine/record/compare.py: where two runs part, channel diffs, summaries, pairing recordings.

Token streams are built from texts cut at chosen points, so each test states the two outputs and
their cuts and checks the parting against them: the shared prefix before it, the tokens that
differ at it. Real runs of real models are compared in tests/app/test_rerun.py.
"""

from __future__ import annotations

import math
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from engine.backends.base import Finish, Timings, Token
from engine.record.compare import Side, channel_diff, compare, compare_sessions, pairs, parting
from engine.record.reader import read_session
from engine.record.recording import Recorder


def toks(*texts: str, top: dict[int, list[tuple[str, float]]] | None = None) -> list[Token]:
    top = top or {}
    return [Token(1000 + hash(t) % 1000, t, 0.0, tuple(top.get(i, ()))) for i, t in
            enumerate(texts)]


def result(reasoning="", content="", calls=(), finish="stop", **anomalies) -> dict:
    return {"reasoning": reasoning, "content": content, "tool_calls": list(calls),
            "finish_reason": finish, "anomalies": anomalies}


def test_the_same_stream_does_not_part() -> None:
    a = toks("Hel", "lo", " world")
    assert parting(a, list(a)) is None


def test_the_first_differing_token_of_one_vocabulary() -> None:
    a = toks("The", " cat", " sat", ".")
    b = toks("The", " cat", " ran", " off")
    p = parting(a, b)
    assert p is not None
    assert (p.index_a, p.index_b, p.offset) == (2, 2, len("The cat"))
    assert (p.token_a.text, p.token_b.text) == (" sat", " ran")


def test_a_token_that_shares_a_prefix_with_the_other_is_still_the_parting() -> None:
    """" the" against " then": the texts agree one character further, but the runs chose
    different tokens at token 1."""
    p = parting(toks("Go", " the", " end"), toks("Go", " then", "d"))
    assert p is not None and (p.index_a, p.index_b, p.offset) == (1, 1, 2)


def test_another_cut_of_the_same_text_is_not_a_parting() -> None:
    a = toks("Hello", " wor", "ld", "!", " Bye")
    b = toks("Hel", "lo", " world", "!", " Ciao")
    p = parting(a, b)
    assert p is not None
    assert (p.index_a, p.index_b) == (4, 4)
    assert p.offset == len("Hello world!")
    assert parting(toks("ab", "cd"), toks("a", "bcd")) is None


def test_one_side_ends_first() -> None:
    p = parting(toks("a", "b"), toks("a", "b", "c"))
    assert p is not None
    assert (p.index_a, p.index_b, p.token_a, p.token_b.text) == (2, 2, None, "c")
    assert "(end)" in p.describe()


@given(st.lists(st.text(min_size=1, max_size=3), min_size=1, max_size=8),
       st.lists(st.text(min_size=1, max_size=3), min_size=1, max_size=8))
def test_the_parting_is_at_a_shared_prefix_of_both_texts(xs: list[str], ys: list[str]) -> None:
    a, b = toks(*xs), toks(*ys)
    p = parting(a, b)
    ta, tb = "".join(xs), "".join(ys)
    if p is None:
        assert ta == tb
        return
    # Both sides agree on everything before the parting, which starts a token on each side.
    assert "".join(xs[:p.index_a]) == "".join(ys[:p.index_b]) == ta[:p.offset] == tb[:p.offset]
    assert ta != tb  # another cut of the same text never parts


def test_each_sides_probability_of_both_tokens() -> None:
    a = toks("x", " yes", top={1: [(" yes", -0.2), (" no", -1.9)]})
    b = toks("x", " no", top={1: [(" maybe", -0.1), (" no", -2.5)]})
    p = parting(a, b)
    assert p is not None
    assert math.isclose(p.p_a_own, math.exp(-0.2)) and math.isclose(p.p_a_other, math.exp(-1.9))
    assert math.isclose(p.p_b_own, math.exp(-2.5)) and p.p_b_other is None


def test_channel_diff_marks_where_and_how_much() -> None:
    d = channel_diff("content", "It is sunny today.", "It is rainy today.")
    assert not d.same and d.at == len("It is ")
    assert 0 < d.ratio < 1 and all(op[0] != "equal" for op in d.opcodes)
    assert channel_diff("reasoning", "same", "same").same


def test_summary_says_calls_arguments_finish_and_anomalies() -> None:
    call = {"id": "c0", "name": "get_weather", "arguments": {"city": "Paris"}}
    other = {**call, "arguments": {"city": "Lyon"}}
    a = Side("a", tuple(toks("<tool_call>", "{")), result(calls=[call], finish="tool_calls"),
             finish="stop")
    b = Side("b", tuple(toks("<tool_call>", "[")),
             result(calls=[other], finish="tool_calls", implicit_reasoning_end=1), finish="stop")
    c = compare(a, b)
    assert c.same_calls and not c.same_arguments and c.same_finish and not c.identical
    line = c.summary()
    assert "same calls? yes" in line and "same arguments? no" in line
    assert "anomalies: none | implicit_reasoning_end 1" in line
    assert "arguments" in c.changed()
    same = compare(a, a)
    assert same.identical and same.change == 0 and same.changed() == "nothing"


def _record(path: Path, outputs: list[str], counterparts: list[str] | None = None) -> None:
    with Recorder(path, model="m", rerun_of="orig.jsonl" if counterparts else "") as rec:
        for k, text in enumerate(outputs):
            rid = f"r{k}"
            rec.request(rid, {"messages": [{"role": "user", "content": str(k)}]}, "p")
            if counterparts:
                rec.counterpart(rid, counterparts[k])
            for i, piece in enumerate(text.split(" ")):
                rec.token(rid, i, Token(i, piece + " ", 0.0))
            rec.finish(rid, Finish("stop", Timings()), result(content=text))


def test_a_rerun_pairs_by_counterpart_and_sorts_by_change(tmp_path: Path) -> None:
    _record(tmp_path / "a.jsonl", ["one two three", "red green blue", "up down"])
    # The rerun's requests in another order, naming their originals.
    _record(tmp_path / "b.jsonl", ["up down", "one two four", "cyan magenta yellow"],
            counterparts=["r2", "r0", "r1"])
    first, second = read_session(tmp_path / "a.jsonl"), read_session(tmp_path / "b.jsonl")
    assert second.rerun_of == "orig.jsonl"
    assert [(x.id, y.counterpart) for x, y in pairs(first, second)] == \
        [("r2", "r2"), ("r0", "r0"), ("r1", "r1")]
    listed = compare_sessions(first, second)
    assert [c.a.id for c in listed] == ["r1", "r0", "r2"]  # most changed first
    assert listed[-1].identical and listed[1].parting.index_a == 2


def test_two_recordings_without_counterparts_pair_in_order(tmp_path: Path) -> None:
    _record(tmp_path / "a.jsonl", ["a b", "c d", "e f"])
    _record(tmp_path / "b.jsonl", ["a b", "c x"])
    got = pairs(read_session(tmp_path / "a.jsonl"), read_session(tmp_path / "b.jsonl"))
    assert [(x.id, y.id) for x, y in got] == [("r0", "r0"), ("r1", "r1")]
