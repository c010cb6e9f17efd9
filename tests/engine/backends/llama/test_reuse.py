"""The disk prompt cache on the real default model (engine/backends/llama/reuse.py and
disk_cache.py through LlamaEngine): a prompt served, the engine closed and started again, the
prefix comes from disk and the greedy answer is the one computed without it; in both KV
layouts, in every slot of parallel=4; another model never loads it; a damaged file is skipped
and the answer is still right; the size bound holds. Where reuse failed, `Finish.prefix` says
where the prompt left the cache.

Reference for "the same answer": the same prompt served a second time in the first process,
from its slot. That run re-decodes the prompt's last token alone on the same cached state,
exactly what a disk load does; the cold first run is checked too (the last token is decoded
inside a chunk there, which could move a near-tie; on these prompts it does not).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.backends.llama.engine import LlamaEngine
from tests.engine.backends.llama.test_batch import same_or_near_tie
from tests.engine.backends.llama.test_engine import Collector, chatml

pytestmark = pytest.mark.model

SYSTEM = "You are a helpful assistant. Tools: " + " ".join(
    f"tool_{i}(x) returns the {i}th fact about x." for i in range(40))
P = chatml("What is the capital of France?", SYSTEM)
OTHERS = [chatml(q, SYSTEM) for q in ("Name a fruit.", "Say hello.", "Count to three.",
                                      "What colour is the sky?")]


@pytest.fixture
def make(default_model: Path, tmp_path: Path) -> Callable[..., LlamaEngine]:
    engines: list[LlamaEngine] = []

    def make(model: Path = default_model, **kw) -> LlamaEngine:
        kw.setdefault("cache_dir", tmp_path / "kv")
        kw.setdefault("n_ctx", 2048)
        eng = LlamaEngine(model, n_threads=1, **kw)
        assert eng.ready.wait(60) and eng.load_error is None
        engines.append(eng)
        return eng

    yield make
    for eng in engines:
        eng.close()


def serve(engine: LlamaEngine, *prompts: str, max_tokens: int = 12,
          top_logprobs: int = 0) -> list[Collector]:
    cs = [Collector(p, max_tokens=max_tokens, top_logprobs=top_logprobs) for p in prompts]
    for c in cs:
        engine.submit(c.job)
    for c in cs:
        c.wait(180)
    return cs


@pytest.mark.parametrize("unified", [True, False], ids=["pool", "split"])
def test_a_restart_loads_the_prompt_from_disk_and_answers_the_same(make, unified):
    first = make(parallel=2, kv_unified=unified)
    (cold,) = serve(first, P)
    (warm,) = serve(first, P)  # from its slot
    assert cold.finish.timings.cached_tokens == 0
    assert warm.finish.timings.disk_tokens == 0 and warm.finish.prefix.source == "slot"
    first.close()  # writes the queued save
    again = make(parallel=2, kv_unified=unified)
    (disk,) = serve(again, P)
    t = disk.finish.timings
    assert t.disk_tokens == t.cached_tokens == t.prompt_tokens - 1
    assert disk.finish.prefix.source == "disk" and disk.finish.prefix.held >= t.prompt_tokens
    assert [x.id for x in disk.tokens] == [x.id for x in warm.tokens]
    assert disk.text == cold.text


@pytest.mark.parametrize("unified", [True, False], ids=["pool", "split"])
def test_every_slot_of_four_reuses_a_shared_prefix_from_disk(make, unified):
    first = make(parallel=4, kv_unified=unified)
    serve(first, P)
    first.close()
    reference = make(parallel=1, cache_dir=None)  # no disk cache: what each answers cold
    expected = serve(reference, *OTHERS, top_logprobs=3)
    again = make(parallel=4, kv_unified=unified, n_ctx=4096)
    got = serve(again, *OTHERS, top_logprobs=3)
    assert sorted(c.finish.timings.slot for c in got) == [0, 1, 2, 3]
    held = [c.finish.prefix.held for c in got]  # what each shares with P: 676 or 677 tokens
    assert min(held) > 300  # the system prompt and the user turn's opening
    cached = [c.finish.timings.cached_tokens for c in got]
    disk = [c.finish.timings.disk_tokens for c in got]
    if unified:  # each loads the file into its own sequence
        assert disk == cached == held
    else:  # the first loads it; the others copy its split cache (Batcher._borrow), cheaper,
        # which holds the prefix the first shares with P (a token short of their own, at most)
        assert disk[0] == cached[0] == held[0]
        assert all(c in (h, cached[0]) for c, h in zip(cached, held, strict=True))
    # Four decoded together against each alone: the same up to the near-tie rule of
    # tests/engine/backends/llama/test_batch.py (a batch of four sums in another order).
    for want, c in zip(expected, got, strict=True):
        same_or_near_tie(want.tokens, c.tokens)  # asserts a difference is a near-tie


def test_another_model_never_loads_this_ones_state(make, default_model, tmp_path, caplog):
    first = make()
    (cold,) = serve(first, P)
    first.close()
    # The same weights under another name: a different file, so a different fingerprint.
    data = bytearray(default_model.read_bytes())
    # general.name's value: after the key, its type (u32) and its length (u64).
    at = data.index(b"general.name") + len(b"general.name") + 12
    data[at] ^= 0x20  # one letter's case
    other_model = tmp_path / "other.gguf"
    other_model.write_bytes(bytes(data))
    other = make(other_model)
    ours = next((tmp_path / "kv").glob("ns-*/*.kv"))
    theirs = other._batcher.disk.dir
    assert theirs != ours.parent
    shutil.copy(ours, theirs / ours.name)  # planted: the header still names our namespace
    with caplog.at_level(logging.WARNING, "prism"):
        (fresh,) = serve(other, P)
    assert fresh.finish.timings.cached_tokens == 0 and fresh.finish.prefix.source == ""
    assert "foreign" in caplog.text
    assert fresh.text == cold.text


def test_a_damaged_state_is_skipped_and_the_answer_is_still_right(make, tmp_path, caplog):
    first = make()
    (cold,) = serve(first, P)
    first.close()
    (f,) = (tmp_path / "kv").glob("ns-*/*.kv")
    data = bytearray(f.read_bytes())
    for i in range(len(data) - 4000, len(data), 97):  # scribble over the end of the V cache
        data[i] ^= 0x5A
    f.write_bytes(bytes(data))
    again = make()
    with caplog.at_level(logging.WARNING, "prism"):
        (c,) = serve(again, P)
    assert "corrupt" in caplog.text and not f.exists()
    assert c.finish.timings.cached_tokens == 0
    assert c.text == cold.text


def test_the_cache_keeps_to_its_size(make, tmp_path):
    first = make()
    serve(first, P)
    first.close()
    (f,) = (tmp_path / "kv").glob("ns-*/*.kv")
    one = f.stat().st_size
    small = make(cache_size=int(one * 1.5))  # room for one entry
    unrelated = chatml("Tell me about the sea. " * 60)
    serve(small, unrelated)
    small.close()  # its save is queued after the reply's end, and written by close at latest
    files = list((tmp_path / "kv").glob("ns-*/*.kv"))
    assert len(files) == 1 and files[0] != f  # the older one went
    assert sum(p.stat().st_size for p in files) <= one * 1.5


def test_the_forensics_say_where_a_prompt_left_the_cache(make):
    eng = make(cache_dir=None)
    serve(eng, P)
    q = P.replace("capital of France", "capital of Spain")
    (c,) = serve(eng, q)
    m = c.finish.prefix
    assert m.source == "slot" and m.held == c.finish.timings.cached_tokens
    assert q[m.prompt_char:].startswith(m.prompt_text[:6])  # where, in the prompt's text
    assert m.prompt_text.lstrip().startswith("Spain") and m.cached_text.lstrip().startswith(
        "France")


def test_a_save_waits_until_no_sequence_decodes_beside_it(make, tmp_path):
    # Copying a state out holds the engine thread, so a job that ends while another decodes is
    # saved later (Batcher._persist): when its slot is wanted for another prompt, when nothing
    # decodes any more, or at close. Here: held while B decodes, written when C takes A's slot.
    eng = make(parallel=2, n_ctx=4096)
    folder = eng._batcher.disk
    files = lambda: list(folder.dir.glob("*.kv"))  # noqa: E731
    b = Collector(chatml("Write x."), max_tokens=1500, grammar='root ::= "x"{1600}')
    eng.submit(b.job)
    while not b.tokens:  # B decodes before A comes
        assert not b.done.wait(0.05), b.finish
    (a,) = serve(eng, P)
    folder.flush()
    assert not b.done.is_set(), "B must still be decoding for this test to mean anything"
    assert files() == [] and a.finish.timings.prompt_tokens > 256  # worth saving, not yet
    serve(eng, chatml("Tell me about the sea. " * 60))  # the one free slot is A's
    folder.flush()
    assert not b.done.is_set()
    assert len(files()) == 1  # A's, written before C's prompt cut it
    b.job.cancelled.set()
    b.wait(60)
    eng.close()  # C and B (cancelled) end with nothing beside them: saved then
    assert len(files()) >= 2
    again = make(parallel=2, n_ctx=4096)
    (disk,) = serve(again, P)
    assert disk.finish.prefix.source == "disk"
    assert disk.finish.timings.disk_tokens == disk.finish.timings.prompt_tokens - 1
    assert disk.text == a.text
