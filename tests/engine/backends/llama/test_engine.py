"""engine/backends/llama/engine.py on the real embedded model (SmolLM2-135M-Instruct, ChatML), plus
StopGate.

The model loads once per module (about a second); every generation is kept to a few tokens
so the file runs in seconds on two cores. Grammars make outputs deterministic where a test
needs exact text.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.backends.base import Finish, Job, Token
from engine.backends.llama.engine import LlamaEngine, StopGate
from engine.chat.request import Sampling


def chatml(user: str, system: str = "You are a helpful assistant.") -> str:
    return (
        f"<|im_start|>system\n{system}<|im_end|>\n"
        f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    )


class Collector:
    def __init__(self, prompt: str, **kw) -> None:
        self.tokens: list[Token] = []
        self.finish: Finish | None = None
        self.done = threading.Event()
        kw.setdefault("sampling", Sampling(temperature=0.0))
        self.job = Job(prompt=prompt, on_token=self.tokens.append, on_finish=self._fin, **kw)

    def _fin(self, fin: Finish) -> None:
        self.finish = fin
        self.done.set()

    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens)

    def wait(self, timeout: float = 60.0) -> Finish:
        assert self.done.wait(timeout), "job did not finish"
        assert self.finish is not None
        return self.finish


def run(engine: LlamaEngine, prompt: str, **kw) -> Collector:
    c = Collector(prompt, **kw)
    engine.submit(c.job)
    c.wait()
    return c


@pytest.fixture(scope="module")
def engine(default_model: Path) -> Iterator[LlamaEngine]:
    eng = LlamaEngine(default_model, n_ctx=2048)
    assert eng.ready.wait(60)
    assert eng.load_error is None
    yield eng
    eng.close()


# -- StopGate: pure Python ---------------------------------------------------------------


def _gate(pieces: list[bytes], stops: tuple[str, ...] = ()) -> tuple[list[Token], bool]:
    gate = StopGate(stops)
    out: list[Token] = []
    for i, data in enumerate(pieces):
        out += gate.push(i, data, float(i))
        if gate.stopped:
            break
    return out + gate.finish(), gate.stopped


def test_gate_holds_split_characters() -> None:
    smile = "🙂".encode()
    toks, _ = _gate([b"a", smile[:1], smile[1:3], smile[3:], b"b"])
    assert [t.text for t in toks] == ["a", "", "", "🙂", "b"]
    toks, _ = _gate([b"x", smile[:2]])  # ends mid-character: replaced, never raised
    assert "".join(t.text for t in toks) == "x\ufffd"


def test_gate_cuts_stop_strings_across_tokens() -> None:
    toks, stopped = _gate([b"Hel", b"lo EN", b"D tail", b"more"], ("END",))
    assert stopped
    assert [t.text for t in toks] == ["Hel", "lo ", ""]
    toks, stopped = _gate([b"a E", b"N", b"x"], ("END",))  # a false start is released
    assert not stopped and "".join(t.text for t in toks) == "a ENx"


@given(st.lists(st.lists(st.integers(1, 255), max_size=5).map(bytes), max_size=12),
       st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               max_size=12))
def test_gate_without_stops_releases_as_the_holding_path_does(pieces, text) -> None:
    # No stop string: a token goes out at its push unless it ends mid-character (the short
    # path). The same as the holding path, here taken with a stop string that never occurs
    # (no NUL byte is generated).
    pieces = [*pieces, text.encode()]
    fast, held = StopGate(()), StopGate(("\x00never",))
    for i, data in enumerate(pieces):
        a, b = fast.push(i, data, float(i)), held.push(i, data, float(i))
        assert [(t.id, t.text) for t in a] == [(t.id, t.text) for t in b]
    assert [(t.id, t.text) for t in fast.finish()] == [(t.id, t.text) for t in held.finish()]


# -- the real model ----------------------------------------------------------------------


@pytest.mark.model
def test_short_generation(engine: LlamaEngine) -> None:
    assert engine.name == "SmolLM2-135M-Instruct.Q4_1"
    assert engine.state == "idle"
    c = run(engine, chatml("What is the capital of France?"), max_tokens=12)
    fin = c.finish
    assert fin.reason in ("length", "stop")
    assert c.tokens and c.text.strip()
    t = fin.timings
    assert t.output_tokens == len(c.tokens) <= 12
    assert t.prompt_tokens == len(engine.tokenize(c.job.prompt)) > 10
    assert t.prompt_ms > 0 and t.ttft_ms >= t.prompt_ms and t.decode_ms > 0
    assert t.tokens_per_s > 0
    assert all(a.t <= b.t for a, b in zip(c.tokens, c.tokens[1:], strict=False))
    assert engine.state == "idle"


@pytest.mark.model
def test_grammar_constrains_output(engine: LlamaEngine) -> None:
    grammar = r"""
root ::= "<think>" word " " word "</think>" ("yes" | "no")
word ::= [a-z] [a-z]? [a-z]? [a-z]? [a-z]?
"""
    c = run(
        engine, chatml("Is the sky blue?"), grammar=grammar, max_tokens=40,
        sampling=Sampling(temperature=0.7, seed=1),
    )
    assert c.finish.reason == "stop", c.text
    assert re.fullmatch(r"<think>[a-z]{1,5} [a-z]{1,5}</think>(yes|no)", c.text), c.text


@pytest.mark.model
def test_bad_grammar_is_an_error_and_the_engine_goes_on(engine: LlamaEngine) -> None:
    bad = run(engine, chatml("hi"), grammar="root ::= (", max_tokens=4)
    assert bad.finish.reason == "error" and "grammar" in (bad.finish.error or "")
    assert bad.finish.status == 400  # refused at admission: the request's fault, not ours
    good = run(engine, chatml("hi"), max_tokens=3)
    assert good.finish.status is None
    assert good.finish.reason in ("length", "stop") and good.tokens


@pytest.mark.model
def test_cancel_stops_within_a_token(engine: LlamaEngine) -> None:
    c = Collector(chatml("Write a long story about a dragon."), max_tokens=200)

    def on_token(tok: Token) -> None:
        c.tokens.append(tok)
        if len(c.tokens) == 3:
            c.job.cancel()  # from the engine thread, as a GUI button would, mid-stream

    c.job.on_token = on_token
    engine.submit(c.job)
    fin = c.wait()
    assert fin.reason == "cancelled"
    assert len(c.tokens) == 3
    assert fin.timings.output_tokens == 3


@pytest.mark.model
def test_two_jobs_queued_at_once_run_fifo(engine: LlamaEngine) -> None:
    order: list[str] = []
    a = Collector(chatml("Say hello."), max_tokens=6)
    b = Collector(chatml("Say goodbye."), max_tokens=6)
    a.job.on_finish = lambda f: (order.append("a"), a._fin(f))
    b.job.on_finish = lambda f: (order.append("b"), b._fin(f))
    engine.submit(a.job)
    engine.submit(b.job)
    assert engine.queue_depth() >= 1
    b.wait()
    a.wait()
    assert order == ["a", "b"]
    assert a.tokens and b.tokens
    assert b.finish.timings.queue_ms > a.finish.timings.queue_ms


@pytest.mark.model
def test_kv_reuse_of_an_extended_prompt(engine: LlamaEngine) -> None:
    first_prompt = chatml("Name a colour.")
    first = run(engine, first_prompt, max_tokens=4)
    n_first = first.finish.timings.prompt_tokens
    longer = first_prompt + first.text + "<|im_end|>\n<|im_start|>user\nAnother one?<|im_end|>\n"
    second = run(engine, longer + "<|im_start|>assistant\n", max_tokens=4)
    t = second.finish.timings
    assert t.cached_tokens >= n_first  # the whole first prompt at least, maybe its output too
    assert t.cached_tokens < t.prompt_tokens
    other = run(engine, chatml("Hi.", system="Be terse."), max_tokens=2)  # shares 3 tokens
    assert other.finish.timings.cached_tokens < n_first // 2


@pytest.mark.model
def test_utf8_split_characters_stay_whole(engine: LlamaEngine) -> None:
    target = "🙂 é 你好 ✓"
    c = run(engine, chatml("Write some symbols."), grammar=f'root ::= "{target}"', max_tokens=30)
    assert c.finish.reason == "stop"
    assert c.text == target
    assert engine.detokenize([t.id for t in c.tokens]) == target
    for tok in c.tokens:
        tok.text.encode("utf-8")  # a valid str, no lone surrogates
        assert "\ufffd" not in tok.text
    # The byte-level vocabulary splits at least one of these characters across tokens.
    assert len(c.tokens) > len(target.split())


@pytest.mark.model
def test_stop_strings_are_cut_and_not_emitted(engine: LlamaEngine) -> None:
    grammar = 'root ::= "alpha beta gamma delta"'
    c = run(engine, chatml("Say it."), grammar=grammar, stop=("ta ga",), max_tokens=20)
    assert c.finish.reason == "stop"
    assert c.text == "alpha be"
    whole = run(engine, chatml("Say it."), grammar=grammar, stop=("zeta",), max_tokens=20)
    assert whole.text == "alpha beta gamma delta"  # held-back prefixes were released


@pytest.mark.model
def test_probability_mode(engine: LlamaEngine) -> None:
    c = run(engine, chatml("Count: one, two,"), top_logprobs=3, max_tokens=5)
    assert len(c.tokens) >= 2
    for tok in c.tokens:
        assert len(tok.top) == 3
        lps = [lp for _, lp in tok.top]
        assert lps == sorted(lps, reverse=True)
        assert all(lp <= 0 for lp in lps)
        if tok.text:
            assert tok.top[0][0] == tok.text  # greedy picks the most likely token
    plain = run(engine, chatml("Count: one, two,"), max_tokens=2)
    assert all(tok.top == () for tok in plain.tokens)


@pytest.mark.model
def test_context_overflow_is_an_error(engine: LlamaEngine) -> None:
    c = run(engine, "hello " * 3000, max_tokens=4)
    assert c.finish.reason == "error"
    assert "context" in (c.finish.error or "")
    assert c.finish.timings.prompt_tokens >= 2048


@pytest.mark.model
def test_tokenize_while_generating(engine: LlamaEngine) -> None:
    prompt = chatml("Tell me about the sea.")
    expected = engine.tokenize(prompt)
    c = Collector(prompt, max_tokens=15)
    engine.submit(c.job)
    seen = [engine.tokenize(prompt) for _ in range(20)]
    c.wait()
    assert all(ids == expected for ids in seen)
    assert expected[:1] == engine.tokenize("<|im_start|>")  # special tokens are parsed


@pytest.mark.model
def test_a_failing_callback_ends_that_job_only(engine: LlamaEngine) -> None:
    c = Collector(chatml("hi"), max_tokens=5)

    def boom(tok: Token) -> None:
        raise RuntimeError("consumer bug")

    c.job.on_token = boom
    engine.submit(c.job)
    fin = c.wait()
    assert fin.reason == "error" and "consumer bug" in (fin.error or "")
    after = run(engine, chatml("hi"), max_tokens=2)
    assert after.finish.reason in ("length", "stop") and after.tokens


def test_unusable_model_files_fail_at_construction(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        LlamaEngine(tmp_path / "missing.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(ValueError, match="Failed to load model"):
        LlamaEngine(junk)


@pytest.mark.model
def test_close_cancels_running_and_waiting_jobs(default_model: Path) -> None:
    eng = LlamaEngine(default_model, n_ctx=512)
    running = Collector(chatml("Write a long story."), max_tokens=400)
    waiting = Collector(chatml("And another."), max_tokens=400)
    started = threading.Event()
    running.job.on_token = lambda tok: (running.tokens.append(tok), started.set())
    eng.submit(running.job)
    eng.submit(waiting.job)
    assert started.wait(30)
    eng.close()
    assert running.wait().reason == "cancelled"
    assert waiting.wait().reason == "cancelled"
    assert eng.state == "closed"
    with pytest.raises(RuntimeError, match="closed"):
        eng.submit(Collector("x").job)
    with pytest.raises(RuntimeError, match="closed"):
        eng.tokenize("x")


def test_a_failed_load_is_reported_and_every_job_errors() -> None:
    from engine.backends.llama.engine import QueuedEngine

    class Broken(QueuedEngine):
        name, n_ctx = "broken", 16

        def __init__(self) -> None:
            self._start_worker("test-broken")

        def _setup(self) -> None:
            raise MemoryError("cannot allocate the context")

    eng = Broken()
    assert eng.ready.wait(5)
    assert eng.state == "error"
    assert eng.load_error == "MemoryError: cannot allocate the context"
    c = Collector("x")
    eng.submit(c.job)
    fin = c.wait(5)
    assert fin.reason == "error" and fin.error == eng.load_error
    eng.close()


def test_stop_gate_names_the_stop_string_that_hit():
    gate = StopGate(["END", "##"])
    out = []
    for i, piece in enumerate(["abc", "d#", "#x", "END"]):
        out += gate.push(i, piece.encode(), 0.0)
        if gate.stopped:
            break
    assert gate.hit == "##" and "".join(t.text for t in out) == "abcd"


@pytest.mark.parametrize("mode", ["off", "on"])
def test_flash_attention_is_what_the_engine_was_given(default_model: Path, mode: str,
                                                      caplog) -> None:
    # `--flash-attn` (app/config.py) reaches llama.cpp's context, which says what it runs;
    # either way the greedy answer is the default one's (auto: on, on a CPU) up to a near-tie
    # (flash attention sums in another order).
    from tests.engine.backends.llama.test_batch import same_or_near_tie

    answers = {}
    for m in ("auto", mode):
        with caplog.at_level("DEBUG", "prism.llama"):
            caplog.clear()
            eng = LlamaEngine(default_model, n_ctx=1024, n_threads=1, flash_attn=m)
            try:
                assert eng.ready.wait(60) and eng.load_error is None
                answers[m] = run(eng, "<|im_start|>user\nName a colour.<|im_end|>\n"
                                 "<|im_start|>assistant\n", max_tokens=16, top_logprobs=3)
            finally:
                eng.close()
        said = re.search(r"flash_attn\s*=\s*(\S+)", caplog.text)
        assert said is not None, caplog.text[-2000:]
        assert said.group(1) == {"auto": "auto", "on": "enabled", "off": "disabled"}[m]
    same_or_near_tie(answers["auto"].tokens, answers[mode].tokens)
