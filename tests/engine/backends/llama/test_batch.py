"""engine/backends/llama/batch.py through LlamaEngine(parallel=4) on the real default model
(SmolLM2-135M).

Several jobs at once in one context: each keeps its own limits, stops, seeds, grammar and
cache; a cancel ends one job only; the shared KV pool never truncates silently.

Greedy identity: a sequence decoded beside others is not always byte-identical to the same
sequence decoded alone. llama.cpp's CPU kernels sum in another order when a step's batch has
several rows, so logits move in the last bits and a near-tie can flip (measured on this
model: the first difference after 6 to 50 tokens, always at a near-tie; the same happens with
split per-sequence caches), and which jobs share a step depends on when each arrived. What
holds exactly, and is tested: up to the first difference the outputs are identical, and the
first difference is a near-tie of the reference run (the other run takes one of the
reference's choices within `NEAR_TIE` of its best), never a sequence reading another's cache (that
would diverge at once and by far).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.backends.base import Token
from engine.backends.llama.chunks import MIN_CHUNK
from engine.backends.llama.engine import LlamaEngine
from engine.chat.request import Sampling
from tests.engine.backends.llama.test_engine import Collector, chatml
from tests.support import wait_until

pytestmark = pytest.mark.model

NEAR_TIE = 1.0  # nats between the reference's first and second choice where a flip may occur
PROMPTS = [chatml(q) for q in ("Write a story about a dragon.", "Explain photosynthesis.",
                               "List ten fruits.", "What is the capital of France?")]


@pytest.fixture(scope="module", params=[False, True], ids=["split", "pool"])
def engine(request, default_model: Path) -> Iterator[LlamaEngine]:
    # Both KV layouts: split caches (what the app picks where they fit) and the unified pool.
    eng = LlamaEngine(default_model, n_ctx=2048, parallel=4, n_threads=1,
                      kv_unified=request.param)
    assert eng.ready.wait(60) and eng.load_error is None
    yield eng
    eng.close()


def start(engine: LlamaEngine, prompt: str, **kw) -> Collector:
    c = Collector(prompt, **kw)
    engine.submit(c.job)
    return c


def together(engine: LlamaEngine, prompts: list[str], **kw) -> list[Collector]:
    cs = [start(engine, p, **kw) for p in prompts]
    for c in cs:
        c.wait(120)
    return cs


def same_or_near_tie(ref: list[Token], other: list[Token]) -> int:
    """Index of the first differing token (len when identical); asserts a difference is a
    near-tie of the reference run: the other run took one of its choices within NEAR_TIE of
    the best (several can be that close: the shift then picks among them)."""
    n = min(len(ref), len(other))
    i = next((k for k in range(n) if ref[k].id != other[k].id), n)
    if i < n:
        best = ref[i].top[0][1]
        near = {text for text, lp in ref[i].top[1:] if best - lp < NEAR_TIE}
        assert near, (i, ref[i].top)  # the reference itself was at a near-tie there
        assert other[i].text in near or not other[i].text, (i, other[i], ref[i].top)
    return i


def test_four_jobs_at_once_keep_their_own_limits_stops_and_seeds(engine: LlamaEngine) -> None:
    busy: list[int] = []

    def watch(c: Collector):
        return lambda tok: (c.tokens.append(tok), busy.append(engine.busy_slots()))

    kws = [dict(max_tokens=5), dict(max_tokens=9), dict(max_tokens=40, stop=("\n",)),
           dict(max_tokens=12)]
    runs = []
    for _ in range(3):
        cs = [Collector(p, sampling=Sampling(temperature=1.0, seed=10 + i), **kw)
              for i, (p, kw) in enumerate(zip(PROMPTS, kws, strict=True))]
        for c in cs:
            c.job.on_token = watch(c)
            engine.submit(c.job)
        for c in cs:
            c.wait(120)
        runs.append(cs)
    # The first run decodes the four prompts whole; the later two find them cached and
    # decode only each one's last token, a step of another shape, whose logits may differ in
    # the last bits (module docstring). So the seeds are compared between the later two.
    first, second, third = runs
    assert max(busy) == 4  # all four were decoding in the same steps
    for c, kw in zip(first, kws, strict=True):
        assert c.finish.reason in ("length", "stop") and c.tokens
        assert c.finish.timings.output_tokens == len(c.tokens) <= kw["max_tokens"]
        assert len(c.tokens) == kw["max_tokens"] or c.finish.reason == "stop"
    assert "\n" not in first[2].text  # its stop string applies to it alone
    # Each sequence samples with its own seed: the same four seeded jobs again, same text.
    assert [c.text for c in second] == [c.text for c in third]
    assert len({c.text for c in first}) == 4


def test_greedy_beside_three_others_matches_alone_up_to_a_near_tie(engine: LlamaEngine) -> None:
    kw = dict(max_tokens=40, top_logprobs=5)
    alone = [together(engine, [p], **kw)[0] for p in PROMPTS]
    beside = together(engine, PROMPTS, **kw)
    for ref, other in zip(alone, beside, strict=True):
        assert other.finish.reason == ref.finish.reason or other.finish.reason in ("length",
                                                                                  "stop")
        i = same_or_near_tie(ref.tokens, other.tokens)
        assert i >= 1  # the first token comes from the same prompt decode: never a mix-up
        # Probability mode reads each sequence's own logits row: greedy took its top choice.
        assert all(tok.top[0][0] == tok.text for tok in other.tokens if tok.text), other.text


def test_cancelling_one_of_four_leaves_the_others_going(engine: LlamaEngine) -> None:
    kw = dict(max_tokens=24, top_logprobs=5)
    reference = together(engine, PROMPTS, **kw)
    cs = [Collector(p, **kw) for p in PROMPTS]
    victim = cs[1]

    def on_token(tok: Token) -> None:
        victim.tokens.append(tok)
        if len(victim.tokens) == 3:
            victim.job.cancel()  # on the engine thread, mid-step, as a GUI Stop would

    victim.job.on_token = on_token
    for c in cs:
        engine.submit(c.job)
    for c in cs:
        c.wait(120)
    assert victim.finish.reason == "cancelled" and len(victim.tokens) == 3
    for ref, c in zip(reference, cs, strict=True):
        if c is victim:
            continue
        assert c.finish.reason == ref.finish.reason
        assert c.finish.timings.output_tokens == ref.finish.timings.output_tokens
        # Identical while all four ran; after the cancel, identical or a near-tie flip.
        assert same_or_near_tie(ref.tokens, c.tokens) >= 3


def test_kv_reuse_is_per_slot(engine: LlamaEngine) -> None:
    a1, b1 = together(engine, [chatml("Name a colour.", system="You name colours."),
                               chatml("Name an animal.", system="Be terse.")], max_tokens=4)
    # Two other conversations pass through meanwhile; the first two keep their caches.
    together(engine, [chatml("Count to three.", system="Count."),
                      chatml("Say hi.", system="Be kind.")], max_tokens=3)

    def follow(c: Collector) -> str:
        return c.job.prompt + c.text + "<|im_end|>\n<|im_start|>user\nAnother one?<|im_end|>\n" \
            "<|im_start|>assistant\n"

    a2, b2 = together(engine, [follow(a1), follow(b1)], max_tokens=4)
    for first, second in ((a1, a2), (b1, b2)):
        t = second.finish.timings
        assert t.cached_tokens >= first.finish.timings.prompt_tokens  # its own slot's cache
        assert t.cached_tokens < t.prompt_tokens
    fresh = together(engine, [chatml("Unrelated.", system="Different system prompt.")],
                     max_tokens=2)[0]
    assert fresh.finish.timings.cached_tokens < 5  # shares only the first few tokens


def test_a_grammar_job_beside_a_free_one(engine: LlamaEngine) -> None:
    # A bounded word, so the grammar itself ends the answer well within max_tokens (an open
    # [a-z]+ let a sampled run go on past it).
    grammar = 'root ::= ("yes" | "no") " because " [a-z] [a-z]? [a-z]? [a-z]? [a-z]? "."'
    constrained = start(engine, chatml("Is the sky blue?"), grammar=grammar, max_tokens=20,
                        sampling=Sampling(temperature=0.7, seed=3))
    free = start(engine, PROMPTS[0], max_tokens=20)
    constrained.wait(120)
    free.wait(120)
    assert re.fullmatch(r"(yes|no) because [a-z]{1,5}\.", constrained.text), constrained.text
    assert constrained.finish.reason == "stop"
    assert free.finish.reason == "length" and len(free.tokens) == 20
    assert not re.fullmatch(r"(yes|no) because .*", free.text)


def test_a_cancelled_waiting_job_leaves_the_queue_at_once(engine: LlamaEngine) -> None:
    running = [start(engine, p, max_tokens=300) for p in PROMPTS]
    wait_until(lambda: engine.busy_slots() == 4, 30, what="four busy slots")
    waiting = [start(engine, chatml("Wait for me."), max_tokens=2) for _ in range(2)]
    assert engine.queue_depth() == 2
    waiting[0].job.cancel()
    assert engine.queue_depth() == 1  # at once: the 429 limit counts only live waiters
    fin = waiting[0].wait(30)
    assert fin.reason == "cancelled" and fin.timings.output_tokens == 0
    assert not any(c.done.is_set() for c in running)  # it did not wait for a slot to free
    for c in running:
        c.job.cancel()
    assert waiting[1].wait(60).reason in ("length", "stop")  # FIFO: its turn came
    assert all(c.wait(60).reason == "cancelled" for c in running)


def test_a_long_prompt_is_prefilled_in_chunks_and_cancellable_between_them(
    default_model: Path,
) -> None:
    eng = LlamaEngine(default_model, n_ctx=2048, parallel=2, n_threads=1, prefill_chunk=32)
    try:
        assert eng.ready.wait(60)
        long_prompt = chatml("Summarise: " + "the quick brown fox jumps over the lazy dog. " * 80)
        n_long = len(eng.tokenize(long_prompt))
        assert n_long > 600
        gen = Collector(chatml("Write a long story."), max_tokens=200)
        long = Collector(long_prompt, max_tokens=5)
        steps: list[int] = []

        def on_token(tok: Token) -> None:
            gen.tokens.append(tok)
            if len(gen.tokens) == 3:
                eng.submit(long.job)  # its prompt is decoded 32 tokens a step beside `gen`
            if long.job.submitted_at and len(steps) < 6:
                steps.append(len(gen.tokens))
            if len(steps) == 6:
                long.job.cancel()

        gen.job.on_token = on_token
        eng.submit(gen.job)
        assert long.wait(60).reason == "cancelled"
        gen.job.cancel()
        gen.wait(60)
        assert long.finish.timings.output_tokens == 0 and len(steps) == 6
        # The chunks decoded before the cancel stay in that slot's cache: a retry reuses them.
        # `gen` got a token every step meanwhile, and each step took one chunk of the long
        # prompt, at most 32 tokens (fewer where a token's share of a step is dear, so that
        # `gen` keeps its pace: chunks.py): about six chunks were in when the cancel came, not
        # the whole prompt.
        retry = Collector(long_prompt, max_tokens=1)
        eng.submit(retry.job)
        t = retry.wait(60).timings
        assert MIN_CHUNK <= t.cached_tokens <= 8 * 32 < n_long - 1
    finally:
        eng.close()


FOX = "the quick brown fox jumps over the lazy dog. "


def kv_held(eng: LlamaEngine, seq: int) -> tuple[int, int]:
    """(tokens slot `seq` says it holds, tokens llama.cpp holds for that sequence: its highest
    position + 1). Read while the engine is idle."""
    import llama_cpp as C

    b = eng._batcher
    return len(b.slots[seq].kv), int(C.llama_memory_seq_pos_max(b._mem, seq)) + 1


def test_a_cancel_stops_a_prefill_only_step_mid_chunk_and_leaves_no_garbage(
    default_model: Path,
) -> None:
    from engine.backends.llama.context import N_BATCH

    long_prompt = chatml("Summarise: " + FOX * 300)
    follow_up = chatml("Summarise: " + FOX * 3)  # shares the long prompt's first 30 tokens
    eng = LlamaEngine(default_model, n_ctx=4096, parallel=1, n_threads=1)
    try:
        assert eng.ready.wait(60) and eng.load_error is None
        n_long = len(eng.tokenize(long_prompt))
        assert n_long > 5 * N_BATCH  # six 512-token chunks if it were decoded whole
        events: list[str] = []
        long = Collector(long_prompt, max_tokens=4)
        long.job.on_finish = lambda fin: (events.append("finished"), long._fin(fin))
        eng.submit(long.job)
        wait_until(lambda: long.job.slot >= 0, 30, what="the long prompt in its slot")
        long.job.cancel()  # its first chunk is being decoded now: that takes seconds here
        events.append("cancelled")
        fin = long.wait(120)
        wait_until(lambda: eng.state == "idle" and eng.busy_slots() == 0, 30, what="idle")
        events.append("idle")
        assert events == ["cancelled", "finished", "idle"]
        assert fin.reason == "cancelled" and fin.timings.output_tokens == 0 and not long.tokens
        # The chunk in flight was stopped, not finished: no prompt token is in the cache, by
        # the slot's account and by llama.cpp's (between-step cancels left a whole chunk).
        assert kv_held(eng, 0) == (0, 0)
        after = Collector(follow_up, max_tokens=16, top_logprobs=3)
        eng.submit(after.job)
        assert after.wait(120).reason in ("length", "stop")
        assert after.finish.timings.cached_tokens == 0
        # Every prompt and output token decoded, but for a last one sampled at the length limit.
        decoded = len(eng.tokenize(follow_up)) + len(after.tokens)
        decoded -= after.finish.reason == "length"
        assert kv_held(eng, 0) == (decoded, decoded)
    finally:
        eng.close()
    fresh = LlamaEngine(default_model, n_ctx=4096, parallel=1, n_threads=1)
    try:
        assert fresh.ready.wait(60) and fresh.load_error is None
        ref = Collector(follow_up, max_tokens=16, top_logprobs=3)
        fresh.submit(ref.job)
        assert ref.wait(120).reason == after.finish.reason
    finally:
        fresh.close()
    # Greedy, alone, same chunks: the same tokens as on an engine that never saw the abort.
    assert [t.id for t in after.tokens] == [t.id for t in ref.tokens] and ref.tokens


def test_a_cancel_never_aborts_a_step_that_another_prompt_is_in(default_model: Path) -> None:
    from engine.backends.llama.context import N_BATCH

    eng = LlamaEngine(default_model, n_ctx=4096, parallel=2, n_threads=1)
    try:
        assert eng.ready.wait(60) and eng.load_error is None
        gate = Collector(chatml("Count: " + "one two three " * 60), max_tokens=1)
        a = Collector(chatml("Summarise: " + FOX * 20), max_tokens=4)
        b = Collector(chatml("Summarise twice: " + FOX * 100), max_tokens=4)
        n_a, n_b = len(eng.tokenize(a.job.prompt)), len(eng.tokenize(b.job.prompt))
        assert n_a < N_BATCH < n_b
        eng.submit(gate.job)
        wait_until(lambda: gate.job.slot >= 0, 30, what="the gate job in its slot")
        # Queued while the gate's prompt decodes, so both are admitted in the same loop turn
        # and the next step (prefill only) holds a's whole prompt and b's first chunk.
        eng.submit(a.job)
        eng.submit(b.job)
        wait_until(lambda: b.job.slot >= 0, 60, what="a and b in their slots")
        b.job.cancel()
        assert b.wait(120).reason == "cancelled" and not b.tokens
        assert a.wait(120).reason == "length" and len(a.tokens) == 4
        assert a.finish.timings.prompt_tokens == n_a
        # That step ran to its end: b's chunk in it was committed, not aborted.
        in_step = N_BATCH - (n_a - a.finish.timings.cached_tokens)
        held = b.finish.timings.cached_tokens + in_step
        wait_until(lambda: eng.busy_slots() == 0, 30, what="idle")
        assert kv_held(eng, b.job.slot) == (held, held)
    finally:
        eng.close()


def test_a_full_pool_ends_the_longest_with_length_and_a_reason(default_model: Path) -> None:
    eng = LlamaEngine(default_model, n_ctx=256, parallel=2, n_threads=1)
    try:
        assert eng.ready.wait(60)
        a = start(eng, PROMPTS[0], max_tokens=220, sampling=Sampling(temperature=0.0))
        b = start(eng, PROMPTS[1], max_tokens=220, sampling=Sampling(temperature=0.0))
        fa, fb = a.wait(120), b.wait(120)
        ended = [c for c in (a, b) if c.finish.error]
        assert ended, "two sequences of ~30 + 220 tokens cannot both fit 256 cells"
        for c in ended:
            assert c.finish.reason == "length" and "pool is full" in c.finish.error
            assert c.finish.timings.output_tokens == len(c.tokens) < 220
        total = sum(c.finish.timings.prompt_tokens + c.finish.timings.output_tokens
                    for c in (a, b))
        assert total > 256 - 4 or any(c.finish.reason == "stop" for c in (a, b))
        assert {fa.reason, fb.reason} <= {"length", "stop"}
        # One request alone may still use the whole context.
        solo = start(eng, PROMPTS[2], max_tokens=200)
        assert solo.wait(120).reason in ("length", "stop") and not solo.finish.error
    finally:
        eng.close()


def test_split_caches_give_each_sequence_the_whole_context(default_model: Path) -> None:
    # kv_unified=False (what the app picks when N caches fit the memory budget): each sequence
    # has 256 cells of its own, so where one pool of 256 ended one of these two with "length"
    # (the test above), both run to their own limit; the memory is twice one pool's.
    eng = LlamaEngine(default_model, n_ctx=256, parallel=2, n_threads=1, kv_unified=False)
    pool = LlamaEngine(default_model, n_ctx=256, parallel=2, n_threads=1)
    try:
        assert eng.ready.wait(60) and pool.ready.wait(60)
        assert eng.kv_bytes == 2 * pool.kv_bytes > 0
        a = start(eng, PROMPTS[0], max_tokens=200, sampling=Sampling(temperature=0.0))
        b = start(eng, PROMPTS[1], max_tokens=200, sampling=Sampling(temperature=0.0))
        for c in (a, b):
            assert c.wait(120).reason in ("length", "stop") and not c.finish.error
        assert sum(c.finish.timings.prompt_tokens + c.finish.timings.output_tokens
                   for c in (a, b)) > 256  # more than one pool could hold
        # A prompt of nearly the whole context still fits beside a running one.
        other = start(eng, PROMPTS[2], max_tokens=60, sampling=Sampling(temperature=0.0))
        long = start(eng, chatml("word " * 200), max_tokens=8)
        for c in (other, long):
            assert c.wait(120).reason in ("length", "stop") and not c.finish.error
        assert long.finish.timings.prompt_tokens > 200
    finally:
        eng.close()
        pool.close()


def test_split_caches_share_a_busy_slot_s_prefix(default_model: Path) -> None:
    # A subagent with the main agent's system prompt, sent while the agent generates: its slot
    # copies the agent's cache (engine/backends/llama/batch.py, _borrow) and prefills only its own
    # question.
    system = " ".join(f"Rule {i}: answer briefly about topic {i}." for i in range(40))

    def prompt(q: str) -> str:
        return (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{q}<|im_end|>\n"
                f"<|im_start|>assistant\n")

    kw = dict(max_tokens=16, top_logprobs=5)
    runs = {}
    for shared in (True, False):
        eng = LlamaEngine(default_model, n_ctx=2048, parallel=2, n_threads=1, kv_unified=False)
        try:
            assert eng.ready.wait(60)
            agent = Collector(prompt("Tell me about topic 3."), max_tokens=120)
            if shared:
                eng.submit(agent.job)
                wait_until(lambda a=agent: len(a.tokens) >= 2, 120, what="the agent generating")
            sub = start(eng, prompt("Tell me about topic 7."), **kw)
            sub.wait(120)
            if shared:
                assert agent.wait(120).reason in ("length", "stop") and not agent.finish.error
                assert agent.finish.timings.slot != sub.finish.timings.slot
            runs[shared] = sub
        finally:
            eng.close()
    n_prompt = runs[True].finish.timings.prompt_tokens
    # Everything up to "topic " is reused from the busy slot; alone, nothing is.
    assert runs[True].finish.timings.cached_tokens >= n_prompt - 12
    assert runs[False].finish.timings.cached_tokens == 0
    # The copied cache is the same K/V: the answer is the lone one (up to a near-tie, as for
    # any job decoded beside another).
    assert same_or_near_tie(runs[False].tokens, runs[True].tokens) >= 1


def test_a_step_s_rows_are_in_sequence_order(default_model: Path) -> None:
    # With split caches llama.cpp decodes rows out of sequence order ~11% slower
    # (engine/backends/llama/batch.py, step): the rows follow the slots, not the order the jobs
    # came in.
    from engine.backends.llama.batch import Batcher
    from engine.backends.llama.vocab import Vocab

    vocab = Vocab(default_model)
    b = Batcher(default_model, vocab, lambda job, fin: job.on_finish(fin), n_ctx=512,
                parallel=4, n_threads=1, kv_unified=False)
    try:
        first = Collector(chatml("word " * 60), max_tokens=1)  # no prefix worth reusing
        assert b.admit(first.job)
        while b.busy:
            b.step()
        # Slot 0 is now the most recently used: the next four go to slots 1, 2, 3, then 0.
        cs = [Collector(p, max_tokens=4) for p in PROMPTS]
        for c in cs:
            assert b.admit(c.job)
        assert [c.job.slot for c in cs] == [1, 2, 3, 0]
        b.step()  # the four prompts
        b.step()  # one token each
        batch = b._batch
        assert [batch.seq_id[i][0] for i in range(batch.n_tokens)] == [0, 1, 2, 3]
        while b.busy:
            b.step()
        assert all(c.finish.reason in ("length", "stop") for c in cs)
    finally:
        b.close()
        vocab.close()


def test_state_and_busy_slots(engine: LlamaEngine) -> None:
    assert engine.parallel == 4 and engine.busy_slots() == 0 and engine.state == "idle"
    seen = threading.Event()
    c = Collector(PROMPTS[0], max_tokens=3)
    c.job.on_token = lambda tok: (c.tokens.append(tok), engine.state == "generating"
                                  and engine.busy_slots() == 1 and seen.set())
    engine.submit(c.job)
    c.wait()
    assert seen.is_set()
    wait_until(lambda: engine.state == "idle" and engine.busy_slots() == 0, 5, what="idle")


def test_metrics_show_busy_slots_and_each_request_s_slot(engine: LlamaEngine) -> None:
    from engine.metrics import Metrics

    metrics = Metrics(engine)
    seen: list[dict] = []

    def track(rid: str, c: Collector) -> None:
        def on_token(tok: Token) -> None:
            c.tokens.append(tok)
            metrics.token(rid, tok.t)
            seen.append(metrics.snapshot()["live"])
            metrics.sample()  # what the window's chart timer does

        def on_finish(fin) -> None:
            metrics.request_finished(rid, fin.reason, fin.timings)
            c._fin(fin)

        metrics.request_started(rid, "test", engine.name, 10)
        c.job.on_token, c.job.on_finish = on_token, on_finish
        engine.submit(c.job)

    cs = [Collector(p, max_tokens=6) for p in PROMPTS]
    for i, c in enumerate(cs):
        track(f"r{i}", c)
    for c in cs:
        c.wait(120)
    assert max(s["slots_busy"] for s in seen) == 4
    assert {s["slots_total"] for s in seen} == {4}
    assert max(y for _, y in metrics.series()["busy_slots"]) == 4
    slots = sorted(r["slot"] for r in metrics.snapshot()["requests"])
    assert slots == [0, 1, 2, 3]  # four at once: four different sequences
    assert sorted(c.finish.timings.slot for c in cs) == [0, 1, 2, 3]
