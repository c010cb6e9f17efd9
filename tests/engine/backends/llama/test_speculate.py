"""Draftless speculation (engine/backends/llama/speculate.py): the drafter's look-ups, and on
the real default model through LlamaEngine(speculate=True): greedy output as without
speculation (up to the near-tie rule of tests/engine/backends/llama/test_batch.py: a step that
verifies a draft is a multi-row batch, whose kernels sum in another order), beside a batch
neighbour; acceptance counted; a cancel, a stop string or a multi-byte character inside a draft
leaves the slot's cache exactly its tokens; a grammar-bound job never drafts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.backends.llama.engine import LlamaEngine
from engine.backends.llama.speculate import Drafter
from tests.engine.backends.llama.test_batch import same_or_near_tie
from tests.engine.backends.llama.test_engine import Collector, chatml
from tests.support import wait_until

CODE = "\n".join(f"def f{i}(x):\n    return x * {i} + {i * i}\n" for i in range(12))
EDIT = chatml("Here is a file:\n" + CODE + "\nPrint the whole file again, unchanged.")
STORY = chatml("Write a story about a dragon.")


# -- the drafter: pure Python ----------------------------------------------------------------


def test_a_draft_is_what_followed_the_last_n_tokens_before():
    d = Drafter([1, 2, 3, 4, 5, 6, 1, 2], n=2, max_draft=3)
    assert d.draft() == [3, 4, 5]
    d.extend([3])  # the sequence went on as drafted: the look-up moves with it
    assert d.draft() == [4, 5, 6]


def test_no_match_no_draft_and_never_itself():
    d = Drafter([1, 2, 3], n=2)
    assert d.draft() == []  # (2, 3) occurs only at the end
    assert Drafter([5, 5], n=2).draft() == []


def test_the_draft_length_follows_acceptance():
    d = Drafter(list(range(50)) + list(range(10)), n=3, max_draft=8)
    assert len(d.draft()) == 8
    d.accepted(2, 8)
    assert len(d.draft()) == 2  # back to what was accepted
    d.accepted(2, 2)
    assert len(d.draft()) == 3  # one more after a full accept
    d.accepted(0, 3)
    assert len(d.draft()) == 1  # never below one: a match is still worth a row
    assert d.hits == 4 and d.drafted == 8 + 2 + 3 + 1


# -- the real engine -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engines(default_model: Path) -> Iterator[tuple[LlamaEngine, LlamaEngine]]:
    spec = LlamaEngine(default_model, n_ctx=2048, parallel=2, n_threads=1, kv_unified=False,
                       speculate=True)
    plain = LlamaEngine(default_model, n_ctx=2048, parallel=2, n_threads=1, kv_unified=False)
    for e in (spec, plain):
        assert e.ready.wait(60) and e.load_error is None
    yield spec, plain
    spec.close()
    plain.close()


def serve(engine: LlamaEngine, prompt: str, **kw) -> Collector:
    kw.setdefault("max_tokens", 120)
    kw.setdefault("top_logprobs", 3)
    c = Collector(prompt, **kw)
    engine.submit(c.job)
    c.wait(300)
    return c


def kv_matches_slot(engine: LlamaEngine, seq: int) -> bool:
    """The sequence's cells in llama.cpp are exactly its slot's tokens (no draft left over)."""
    import llama_cpp as C

    b = engine._batcher
    mem = C.llama_get_memory(b.ctx)
    return C.llama_memory_seq_pos_max(mem, seq) == len(b.slots[seq].kv) - 1


pytestmark = pytest.mark.model


@pytest.mark.parametrize("prompt", [EDIT, STORY], ids=["edit", "story"])
def test_greedy_output_is_the_output_without_speculation(engines, prompt):
    spec, plain = engines
    want = serve(plain, prompt)
    got = serve(spec, prompt)
    i = same_or_near_tie(want.tokens, got.tokens)
    assert i >= 20 or i == len(want.tokens)
    assert kv_matches_slot(spec, got.finish.timings.slot)


def test_copying_a_file_is_drafted_and_counted(engines):
    spec, _ = engines
    c = serve(spec, EDIT, max_tokens=150)
    t = c.finish.timings
    assert t.output_tokens == len([x for x in c.tokens if x.text]) or t.output_tokens == len(
        c.tokens)
    assert 0 < t.accepted_tokens <= t.draft_tokens
    assert t.accepted_tokens < t.output_tokens  # each step's first token is never a draft's
    assert t.acceptance > 0.5  # a copy is mostly drafted right
    assert kv_matches_slot(spec, t.slot)


def test_a_neighbour_beside_a_speculating_sequence_decodes_as_alone(engines):
    spec, plain = engines
    alone = serve(plain, STORY, max_tokens=60)
    a = Collector(EDIT, max_tokens=120, top_logprobs=3)
    b = Collector(STORY, max_tokens=60, top_logprobs=3)
    spec.submit(a.job)
    spec.submit(b.job)
    a.wait(300)
    b.wait(300)
    assert a.finish.timings.accepted_tokens > 0  # it did speculate beside the neighbour
    assert same_or_near_tie(alone.tokens, b.tokens) >= 8


def test_a_stop_string_inside_an_accepted_draft_ends_there(engines):
    spec, _ = engines
    c = serve(spec, EDIT, max_tokens=150, stop=("return x * 3",))
    assert c.finish.reason == "stop" and c.finish.stop_sequence == "return x * 3"
    assert "return x * 3" not in c.text and "def f3" in c.text
    assert kv_matches_slot(spec, c.finish.timings.slot)


def test_a_cancel_mid_draft_leaves_the_cache_exactly_its_tokens(engines):
    spec, _ = engines
    c = Collector(EDIT, max_tokens=150)
    spec.submit(c.job)
    wait_until(lambda: len(c.tokens) >= 30, timeout=120, what="30 tokens")
    c.job.cancel()
    fin = c.wait(60)
    assert fin.reason == "cancelled"
    assert kv_matches_slot(spec, fin.timings.slot)
    again = serve(spec, EDIT, max_tokens=40)  # reuses that cache: same answer as fresh
    fresh = serve(engines[1], EDIT, max_tokens=40)
    assert same_or_near_tie(fresh.tokens, again.tokens) >= 20


def test_multibyte_text_split_across_draft_tokens_comes_out_whole(engines):
    spec, plain = engines
    poem = "\n".join(["雪が降る。静かな夜。🌙✨ café, naïve, Ærø."] * 4)
    prompt = chatml("Repeat this exactly:\n" + poem)
    got = serve(spec, prompt, max_tokens=80)
    want = serve(plain, prompt, max_tokens=80)
    assert "\ufffd" not in got.text
    assert same_or_near_tie(want.tokens, got.tokens) >= 10
    assert got.finish.timings.accepted_tokens > 0


def test_a_grammar_bound_job_never_drafts(engines):
    spec, _ = engines
    c = serve(spec, EDIT, max_tokens=40, grammar='root ::= "def f0(x):" [^\\x00]*')
    assert c.text.startswith("def f0(x):")
    assert c.finish.timings.draft_tokens == 0
