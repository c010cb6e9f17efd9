"""LlamaEngine: one llama.cpp model served FIFO from one worker thread.

Owns the `llama_cpp.Llama` instance. It is created, used and freed only on the engine's daemon
worker thread ("prism-llama"), which takes `Job`s from a FIFO queue and calls the job's
`on_token` / `on_finish` callbacks on that thread. Other threads may call `submit`,
`tokenize`, `detokenize`, `queue_depth`, `state` and `close`. `QueuedEngine`, the queue /
worker / cancel / close half, and `StopGate`, the UTF-8 and stop-string half, are shared with
engine/replay.py so both engines behave the same way downstream.

Choices made on purpose:

- Tokenizing from other threads uses a second, vocab-only model (no weights, no context: a few
  MB, loaded in `__init__`) behind its own small lock, so `tokenize` never waits for a running
  generation and never touches the worker's `Llama`. The lock only orders tokenize callers
  among themselves (llama.cpp does not promise its vocab is reentrant).
- KV reuse is llama-cpp-python's own: `Llama.generate(tokens)` (reset=True) keeps the longest
  common prefix of the previous tokens (prompt + output) and the new prompt, and decodes only
  the rest (reset=False would instead append the whole prompt after the old state). We count
  what it actually decoded by overriding `eval`, so `Timings.cached_tokens` is measured, not
  predicted.
- Output bytes go through an incremental UTF-8 decoder; a token whose bytes end mid-character
  is held (with any tokens after it) until the character completes, so `Token.text` is always
  whole characters. Invalid byte sequences become U+FFFD rather than an exception.
- Stop strings are held back at token granularity: a token is released only once no stop
  string can begin inside its text. At a stop, the token where the stop string begins keeps
  the text before it, and later tokens carry "" (they were generated and are counted, but the
  stop string is never emitted). Every generated token except the end-of-generation token is
  reported exactly once, so `"".join(token.text)` is the output.
- Special tokens are detokenized without their text (llama-server's default): end-of-turn
  markers never leak into the output. The end-of-generation token ends the job ("stop") and is
  neither reported nor counted.
- Probability mode (`job.top_logprobs > 0`) reads the last decoded logits row through
  `llama_get_logits_ith(ctx, -1)`; no `logits_all` (that would keep n_ctx x n_vocab floats,
  ~800 MB for SmolLM2 at 4096). Log-probabilities are of the raw logits (before temperature and
  the other samplers, like OpenAI's logprobs); we rank with `argpartition` and normalise only
  the k kept. Measured on the default model (n_vocab 49152, 2-core box): ~0.37 ms a token for
  k=5, ~0.46 ms for k=20, against ~22 ms to decode a token, i.e. under 2% slower.
- Threads: n_threads=None keeps llama-cpp-python's default (half the logical CPUs for decode,
  all of them for prompt batches). On the 2-core dev box one decode thread gives ~40 tokens/s
  and holds up when other processes compete; two give ~55-64 when the machine is idle but
  collapse to ~10-20 under load (llama.cpp's threads spin-wait for each other).
- Timings: queue_ms = job start - submission; prompt_ms = tokenizing + prompt decode;
  ttft_ms = first token - submission (what a client waits); decode_ms = end of prompt decode
  to last token (so tokens_per_s covers sampling and decoding every output token).
"""

from __future__ import annotations

import codecs
import logging
import queue
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engine.base import Finish, Job, Timings, Token
from engine.grammar import check as check_grammar

log = logging.getLogger("prism")

_LOADING, _IDLE, _GENERATING, _CLOSED, _ERROR = "loading", "idle", "generating", "closed", "error"


class StopGate:
    """Turns raw token bytes into `Token`s: whole UTF-8 characters, stop strings cut out.

    Pure Python, no model; `ReplayEngine` uses it too. `push` returns the tokens that can be
    released now; after `stopped` is set, generation must end. `finish` releases the rest.
    """

    def __init__(self, stops: Sequence[str] = ()):
        self.stops = tuple(s for s in stops if s)
        self.stopped = False
        self.hit: str | None = None  # the stop string that stopped it
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending: list[list[Any]] = []  # [id, text, t, top] not yet released
        self._text = ""  # concatenated text of _pending

    def push(self, tok_id: int, data: bytes, t: float, top: tuple = ()) -> list[Token]:
        text = self._decoder.decode(data)
        self._pending.append([tok_id, text, t, top])
        self._text += text
        # A stop string can only begin inside pending text: whatever could start one was held.
        hits = [(p, s) for s in self.stops if (p := self._text.find(s)) >= 0]
        if hits:
            self.stopped = True
            cut, self.hit = min(hits)
            return self._release_all(cut=cut)
        if self._decoder.getstate()[0]:
            return []  # half a character waiting for its next bytes
        return self._release_upto(len(self._text) - self._hold())

    def finish(self) -> list[Token]:
        tail = self._decoder.decode(b"", final=True)  # dangling bytes -> U+FFFD
        if tail and self._pending:
            self._pending[-1][1] += tail
            self._text += tail
        return self._release_all(cut=len(self._text))

    def _hold(self) -> int:
        """Length of the longest tail of the pending text that starts some stop string."""
        best = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self._text)), best, -1):
                if self._text.endswith(s[:k]):
                    best = k
                    break
        return best

    def _release_upto(self, limit: int) -> list[Token]:
        out: list[Token] = []
        end = 0
        while self._pending and end + len(self._pending[0][1]) <= limit:
            tok_id, text, t, top = self._pending.pop(0)
            end += len(text)
            out.append(Token(tok_id, text, t, top))
        self._text = self._text[end:]
        return out

    def _release_all(self, cut: int) -> list[Token]:
        out: list[Token] = []
        pos = 0
        for tok_id, text, t, top in self._pending:
            keep = max(0, min(len(text), cut - pos))
            pos += len(text)
            out.append(Token(tok_id, text[:keep], t, top))
        self._pending.clear()
        self._text = ""
        return out


def _llama_class() -> type:
    """A Llama subclass that notes what each generate() really decoded for its prompt."""
    import llama_cpp

    class _Llama(llama_cpp.Llama):
        prompt_eval: tuple[int, float] | None = None

        def eval(self, tokens: Sequence[int]) -> None:
            super().eval(tokens)
            if self.prompt_eval is None:  # the first eval of a generate() is the prompt
                self.prompt_eval = (len(tokens), time.perf_counter())

    return _Llama


def _load_vocab(path: Path) -> Any:
    import llama_cpp
    from llama_cpp import _internals

    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    return _internals.LlamaModel(path_model=str(path), params=params, verbose=False)


def _tokenize(model: Any, text: str) -> list[int]:
    """Prompt tokens: special tokens parsed, BOS added once if the model wants one (chat
    templates often write it themselves)."""
    import llama_cpp

    data = text.encode("utf-8")
    # llama-cpp-python's LlamaModel.tokenize allocates n_ctx_train ints per call (~0.75 ms on
    # the request path); a token covers at least one byte, so len(data) + 1 always suffices.
    cap = len(data) + 1
    buf = (llama_cpp.llama_token * cap)()
    n = llama_cpp.llama_tokenize(model.vocab, data, len(data), buf, cap, False, True)
    ids = buf[:n] if n >= 0 else model.tokenize(data, add_bos=False, special=True)
    bos = model.token_bos()
    if model.add_bos_token() and bos >= 0 and (not ids or ids[0] != bos):
        ids.insert(0, bos)
    return ids


def _piece(model: Any, tok: int) -> bytes:
    """The bytes of one token (special tokens render as nothing). Unlike
    LlamaModel.detokenize, this handles pieces longer than 32 bytes."""
    import ctypes

    import llama_cpp

    buf = ctypes.create_string_buffer(64)
    n = llama_cpp.llama_token_to_piece(model.vocab, tok, buf, 64, 0, False)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = llama_cpp.llama_token_to_piece(model.vocab, tok, buf, -n, 0, False)
    return buf.raw[:n]


def top_logprobs(llm: Any, model: Any, k: int) -> tuple[tuple[str, float], ...]:
    """The k most likely tokens after the last decode, as (text, logprob)."""
    import llama_cpp

    n_vocab = model.n_vocab()
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    logits = np.ctypeslib.as_array(ptr, shape=(n_vocab,))  # a view: llama.cpp owns it
    k = min(k, n_vocab)
    # Log-softmax is monotonic, so rank the raw logits and normalise only the k we keep.
    idx = np.argpartition(logits, n_vocab - k)[n_vocab - k :]
    idx = idx[np.argsort(-logits[idx], kind="stable")]
    m = float(logits.max())
    log_z = m + float(np.log(np.exp(logits - m, dtype=np.float32).sum(dtype=np.float64)))
    return tuple(
        (_piece(model, int(i)).decode("utf-8", "replace"), float(logits[i]) - log_z) for i in idx
    )


class QueuedEngine:
    """The FIFO half of an engine: a job queue, one daemon worker thread, cancel and close.

    Subclasses set `name`/`n_ctx`, call `_start_worker(thread_name)` at the end of __init__,
    and implement `_serve(job)`, which must call `self._finish(job, ...)` once. `_setup()` runs
    first on the worker thread (load a model there); `_teardown()` runs last on it. A job that
    raises (say, a consumer's on_token) ends with "error" and the worker serves the next one.
    """

    name: str
    n_ctx: int

    def _start_worker(self, thread_name: str) -> None:
        self.ready = threading.Event()
        self.load_error: str | None = None
        self.state = _LOADING
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._lock = threading.Lock()  # orders submit against close
        self._current: Job | None = None
        self._finished = False  # on_finish called for the current job
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("engine is closed")
            if not job.submitted_at:
                job.submitted_at = time.perf_counter()
            self._jobs.put(job)

    def queue_depth(self) -> int:
        """Jobs waiting; the one generating is not counted."""
        return self._jobs.qsize()

    def close(self, timeout: float = 10.0) -> None:
        """Cancel the running job and the waiting ones (their on_finish("cancelled") is called
        on this thread), then stop the worker."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            waiting: list[Job] = []
            while True:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is not None:
                    waiting.append(job)
            self._jobs.put(None)
        current = self._current  # read after _closed is set: see _run
        if current is not None:
            current.cancel()
        for job in waiting:
            job.cancel()
            try:
                job.on_finish(Finish("cancelled", Timings()))
            except Exception:
                log.exception("[prism] on_finish callback failed")
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    # -- worker thread ---------------------------------------------------------------------

    def _setup(self) -> None:
        pass

    def _teardown(self) -> None:
        pass

    def _serve(self, job: Job) -> None:
        raise NotImplementedError

    def _finish(
        self, job: Job, reason: str, timings: Timings, error: str | None = None,
        stop_sequence: str | None = None,
    ) -> None:
        self._finished = True
        job.on_finish(Finish(reason, timings, error, stop_sequence))

    def _run(self) -> None:
        try:
            self._setup()
        except Exception as e:  # reported through load_error and every job
            self.load_error = f"{type(e).__name__}: {e}"
        self.state = _IDLE if self.load_error is None else _ERROR
        self.ready.set()
        try:
            while (job := self._jobs.get()) is not None:
                self._current, self._finished = job, False
                if self._closed:  # close() may have missed it between get() and here
                    job.cancel()
                if self.load_error is not None:
                    self._guarded(
                        job, lambda j: self._finish(j, "error", Timings(), self.load_error)
                    )
                    continue
                self.state = _GENERATING
                try:
                    self._guarded(job, self._serve)
                finally:
                    self._current = None
                    self.state = _IDLE
        finally:
            self.state = _CLOSED
            self._teardown()

    def _guarded(self, job: Job, fn) -> None:
        try:
            fn(job)
        except Exception as e:  # one bad job must not stop the engine
            if self._finished:  # the consumer's on_finish raised: nothing left to tell it
                log.exception("[prism] on_finish callback failed")
                return
            log.warning("[prism] job failed: %s: %s", type(e).__name__, e)
            try:
                self._finish(job, "error", Timings(), f"{type(e).__name__}: {e}")
            except Exception:
                log.exception("[prism] on_finish callback failed")


class LlamaEngine(QueuedEngine):
    """The Engine protocol over llama-cpp-python. See the module docstring."""

    def __init__(
        self,
        model_path: Path | str,
        *,
        n_ctx: int = 4096,
        n_gpu_layers: int = 0,
        n_threads: int | None = None,
        verbose: bool = False,
    ):
        self.model_path = Path(model_path)
        if not self.model_path.is_file():
            raise FileNotFoundError(f"model not found: {self.model_path}")
        self.name = self.model_path.stem
        self.n_ctx = n_ctx
        self._vocab = _load_vocab(self.model_path)  # raises here on a file that is no GGUF
        self._vocab_lock = threading.Lock()
        self._llm: Any = None  # the worker thread's alone
        self._kwargs: dict[str, Any] = {
            "n_ctx": n_ctx,
            "n_gpu_layers": n_gpu_layers,
            "n_threads": n_threads,
            "n_threads_batch": n_threads,
            "verbose": verbose,
        }
        self._start_worker("prism-llama")

    # -- any thread ------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        with self._vocab_lock:
            return _tokenize(self._open_vocab(), text)

    def detokenize(self, ids: Sequence[int]) -> str:
        with self._vocab_lock:
            vocab = self._open_vocab()
            data = b"".join(_piece(vocab, int(i)) for i in ids)
        return data.decode("utf-8", "replace")

    def _open_vocab(self) -> Any:
        if self._vocab is None:
            raise RuntimeError("engine is closed")
        return self._vocab

    def close(self, timeout: float = 10.0) -> None:
        """Cancel the running and waiting jobs, stop the worker, free the model."""
        super().close(timeout)
        with self._vocab_lock:
            if self._vocab is not None:
                self._vocab.close()
                self._vocab = None  # llama.cpp would read freed memory; fail in Python instead

    # -- worker thread ---------------------------------------------------------------------

    def _setup(self) -> None:
        self._llm = _llama_class()(model_path=str(self.model_path), **self._kwargs)

    def _teardown(self) -> None:
        if self._llm is not None:
            self._llm.close()
            self._llm = None

    def _serve(self, job: Job) -> None:
        start = time.perf_counter()
        queue_ms = (start - job.submitted_at) * 1000.0 if job.submitted_at else 0.0
        if job.cancelled.is_set():
            self._finish(job, "cancelled", Timings(queue_ms=queue_ms))
            return
        self._generate(self._llm, job, start, queue_ms)

    def _generate(self, llm: Any, job: Job, start: float, queue_ms: float) -> None:
        import llama_cpp

        model = llm._model
        # The service tokenized the prompt already (to check the context): reuse its ids.
        prompt = list(job.prompt_ids) if job.prompt_ids else _tokenize(model, job.prompt)
        n_prompt = len(prompt)
        if n_prompt >= self.n_ctx:
            self._finish(
                job,
                "error",
                Timings(queue_ms=queue_ms, prompt_tokens=n_prompt),
                f"prompt is {n_prompt} tokens; the context holds {self.n_ctx}",
            )
            return
        grammar = check_grammar(model, job.grammar) if job.grammar else None
        llm.set_seed(job.seed if job.seed is not None else llama_cpp.LLAMA_DEFAULT_SEED)
        gate = StopGate(job.stop)
        limit = self.n_ctx - n_prompt  # llama.cpp cannot decode past the context
        if job.max_tokens is not None:
            limit = min(limit, job.max_tokens)
        reason = "length"
        n_out = 0
        t_first = 0.0
        llm.prompt_eval = None
        gen = llm.generate(
            prompt,
            top_k=job.top_k,
            top_p=job.top_p,
            min_p=job.min_p,
            temp=job.temperature,
            repeat_penalty=job.repeat_penalty,
            grammar=grammar,
        )
        try:
            for tok in gen if limit > 0 else ():
                now = time.perf_counter()
                if not t_first:
                    t_first = now
                if job.cancelled.is_set():
                    reason = "cancelled"
                    break
                if llama_cpp.llama_vocab_is_eog(model.vocab, tok):
                    reason = "stop"
                    break
                n_out += 1
                top = top_logprobs(llm, model, job.top_logprobs) if job.top_logprobs > 0 else ()
                for out in gate.push(tok, _piece(model, tok), now, top):
                    job.on_token(out)
                if gate.stopped:
                    reason = "stop"
                    break
                if n_out >= limit:
                    break
        finally:
            gen.close()
        for out in gate.finish():
            job.on_token(out)
        end = time.perf_counter()
        evaluated, t_prompt = llm.prompt_eval or (n_prompt, t_first or end)
        self._finish(
            job,
            reason,
            Timings(
                queue_ms=queue_ms,
                prompt_ms=(t_prompt - start) * 1000.0,
                ttft_ms=((t_first or end) - (job.submitted_at or start)) * 1000.0,
                decode_ms=(end - t_prompt) * 1000.0 if n_out else 0.0,
                prompt_tokens=n_prompt,
                cached_tokens=max(0, n_prompt - evaluated),
                output_tokens=n_out,
            ),
            stop_sequence=gate.hit,
        )
