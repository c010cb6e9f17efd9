"""Embedder: one model's embedding context (mean pooling), on a worker thread of its own.

Owns `Embedder` (one per model file: a model catalog keeps one per entry), `Embedded` (what a
request gets back) and the errors a request can meet: `InputInvalid` / `InputTooLong` (naming the
input), `EmbedUnavailable` (this model cannot embed here, and why) and `EmbedBusy` (the queue is
full). No HTTP: app/api/embeddings.py speaks OpenAI's shape around it.

Threads (docs/design.md, section 3): the generation model and context belong to the engine
thread ("prism-llama") and are never touched here. An Embedder loads its own copy of the model
with its own context (`embeddings` on, `LLAMA_POOLING_TYPE_MEAN`, as llama-server's
`--embeddings --pooling mean`) on its worker thread ("prism-embed"), which alone creates, uses and
frees them. Nothing is loaded until the first request: a server whose clients never embed pays
nothing. `submit` (any thread) queues the inputs and returns a concurrent future; the event loop
awaits it (`asyncio.wrap_future`) and never blocks. The worker tokenizes (llama.cpp's own
tokenizer, special tokens added as the model wants and special-token text read as text, as
llama-cpp-python's `Llama.embed` does), checks each input against the context, and packs the
inputs of every request waiting into as few decodes as fit (up to `n_ctx` tokens and `n_seq_max`
sequences a decode; each sequence is pooled on its own).

Why each input must fit `n_ctx`: llama.cpp pools a sequence within one micro-batch, so the
context's batch and micro-batch are both `n_ctx`, and an input longer than that is refused, by
index, rather than cut. Vectors are normalized to unit length (OpenAI's are; llama-server's
default): cosine similarity is then a dot product, and the direction is the mean's.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import logging
import math
import multiprocessing
import queue
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.gguf import GGUFError, read_gguf_metadata

log = logging.getLogger("prism")

DEFAULT_CTX = 2048  # tokens one input may have (the model's trained context, if smaller)
N_SEQ_MAX = 16  # inputs pooled in one decode
QUEUE_MAX = 32  # requests waiting for the worker before `submit` refuses (EmbedBusy)
_STOP = None

Input = str | Sequence[int]


@dataclass(frozen=True, slots=True)
class Embedded:
    """One request's vectors (unit length; llama.cpp's float32 values, normalized in double
    precision), in input order, and the tokens its inputs had (what `usage` reports)."""

    vectors: tuple[tuple[float, ...], ...]
    n_tokens: int


class InputInvalid(ValueError):
    """Input `index` cannot be embedded (empty, a token id outside the vocabulary)."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


class InputTooLong(InputInvalid):
    """Input `index` has `n_tokens` tokens, over the `limit` one input may have."""

    def __init__(self, index: int, n_tokens: int, limit: int) -> None:
        super().__init__(index, f"input[{index}] has {n_tokens} tokens; this model embeds at "
                         f"most {limit} tokens per input")
        self.n_tokens, self.limit = n_tokens, limit


class EmbedUnavailable(RuntimeError):
    """This model cannot embed here (it failed to load with embeddings on, or is closed)."""


class EmbedBusy(RuntimeError):
    """Too many requests wait already; try again shortly."""


@dataclass
class _Request:
    inputs: list[Input]
    future: concurrent.futures.Future
    tokens: list[list[int]] | None = None
    vectors: list[tuple[float, ...] | None] | None = None


_open: weakref.WeakSet[Embedder] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """Free every worker's model on its own thread before the interpreter goes (a daemon
    thread left holding a llama.cpp context at exit can crash in its finalizers)."""
    for embedder in list(_open):
        embedder.close(timeout=5.0)


class Embedder:
    """Embeddings of one GGUF. See the module docstring."""

    def __init__(self, model_path: Path | str, *, n_ctx: int | None = None,
                 n_threads: int | None = None, n_gpu_layers: int = 0,
                 n_seq_max: int = N_SEQ_MAX, queue_max: int = QUEUE_MAX) -> None:
        self.model_path = Path(model_path)
        try:
            meta = read_gguf_metadata(self.model_path)
        except (GGUFError, OSError) as e:
            raise EmbedUnavailable(f"cannot read the model: {e}") from None
        arch = meta.get("general.architecture", "")
        trained = int(meta.get(f"{arch}.context_length") or 0)
        want = n_ctx or DEFAULT_CTX
        self.n_ctx = min(want, trained) if trained and not n_ctx else want
        # Known before loading, so a `dimensions` it cannot give is refused without a load.
        self._dimensions = int(meta.get(f"{arch}.embedding_length") or 0)
        self.n_seq_max = n_seq_max
        self._n_threads = n_threads
        self._n_gpu_layers = n_gpu_layers
        self._queue: queue.Queue[_Request | None] = queue.Queue(queue_max)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.error: str | None = None  # why loading failed, once it has
        # The worker thread's alone:
        self._model: Any = None
        self._ctx: Any = None
        self._batch: Any = None
        self._n_vocab = 0
        _open.add(self)

    @property
    def dimensions(self) -> int:
        """The length of every vector (0 where the file does not say and nothing is loaded)."""
        return self._dimensions

    @property
    def loaded(self) -> bool:
        return self._ctx is not None

    @property
    def memory(self) -> int:
        """The bytes it holds: its copy of the weights from the first request on (loading or
        loaded), none before, after a failed load or once closed. Its embedding context's
        buffers are small beside the weights and are not counted."""
        with self._lock:
            if self._thread is None or self._closed or self.error is not None:
                return 0
        try:
            return self.model_path.stat().st_size
        except OSError:
            return 0

    # -- any thread ------------------------------------------------------------------------

    def submit(self, inputs: Sequence[Input]) -> concurrent.futures.Future:
        """Queue `inputs` (texts or token-id lists); the future's result is an `Embedded`, or
        it raises InputInvalid / InputTooLong / EmbedUnavailable. Raises EmbedBusy at once
        when the queue is full, EmbedUnavailable when closed or when loading failed before."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise EmbedUnavailable("the embedding worker is closed")
            if self.error is not None:
                raise EmbedUnavailable(self.error)
            if self._thread is None:  # first use: the worker loads the model
                self._thread = threading.Thread(target=self._run, name="prism-embed",
                                                daemon=True)
                self._thread.start()
            try:
                self._queue.put_nowait(_Request(list(inputs), future))
            except queue.Full:
                raise EmbedBusy(f"{self._queue.maxsize} embedding requests wait "
                                "already") from None
        return future

    def close(self, timeout: float = 10.0) -> None:
        """Stop taking requests; the worker answers those queued already, then frees its
        model (on itself)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        _open.discard(self)
        if thread is None:
            return
        self._queue.put(_STOP)  # blocks only while the worker drains a full queue
        if thread is not threading.current_thread():
            thread.join(timeout)

    # -- worker thread ---------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._load()
        except Exception as e:  # any failure: this model cannot embed
            with self._lock:
                self.error = f"this model cannot embed: {e}"
            log.warning("[prism] embeddings: %s", self.error)
            self._free()  # whatever did load (the weights, when the context failed)
            self._drain(EmbedUnavailable(self.error))
            return
        try:
            while True:
                first = self._queue.get()
                if first is _STOP:
                    break
                group, stop = [first], False
                while True:  # everything else already waiting shares the decodes
                    try:
                        nxt = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is _STOP:
                        stop = True
                        break
                    group.append(nxt)
                self._serve([r for r in group if r.future.set_running_or_notify_cancel()])
                if stop:
                    break
            self._drain(EmbedUnavailable("the embedding worker is closed"))
        finally:
            self._free()

    def _drain(self, exc: Exception) -> None:
        while True:
            try:
                req = self._queue.get_nowait()
            except queue.Empty:
                return
            if req is not _STOP and req.future.set_running_or_notify_cancel():
                req.future.set_exception(exc)

    def _load(self) -> None:
        import llama_cpp as C
        from llama_cpp import _internals

        from engine.backends.llama import log as llama_log

        llama_log.install()
        mp = C.llama_model_default_params()
        mp.n_gpu_layers = self._n_gpu_layers
        # verbose=True: llama-cpp-python must not silence the process while loading (log.py).
        self._model = _internals.LlamaModel(path_model=str(self.model_path), params=mp,
                                            verbose=True)
        raw = self._model.model
        if C.llama_model_has_encoder(raw) and C.llama_model_has_decoder(raw):
            raise EmbedUnavailable("an encoder-decoder model has no pooled embedding")
        cp = C.llama_context_default_params()
        # A sequence is pooled within one micro-batch, so the micro-batch holds n_ctx tokens;
        # rounded up to a multiple of n_seq_max, or llama.cpp's worst-case graph for mean
        # pooling (the tokens split evenly over the sequences) fails an assertion and aborts
        # the process (n_ctx 40 with 3 sequences did).
        cells = -(-self.n_ctx // self.n_seq_max) * self.n_seq_max
        cp.n_ctx = cp.n_batch = cp.n_ubatch = cells
        cp.n_seq_max = self.n_seq_max
        cp.kv_unified = True  # the sequences of one decode share the n_ctx cells
        cp.embeddings = True
        cp.pooling_type = C.LLAMA_POOLING_TYPE_MEAN
        # Off, as llama-cpp-python's Llama has it: on the CPU, flash attention's half-precision
        # sums moved the default model's vectors to a cosine of 0.999 against Llama.embed's;
        # off they agree to 1e-6, and a prompt-only decode gains little from it.
        cp.flash_attn_type = C.LLAMA_FLASH_ATTN_TYPE_DISABLED
        cp.n_threads = self._n_threads or max(multiprocessing.cpu_count() // 2, 1)
        cp.n_threads_batch = self._n_threads or multiprocessing.cpu_count()
        self._ctx = _internals.LlamaContext(model=self._model, params=cp, verbose=True)
        self._batch = _internals.LlamaBatch(n_tokens=cells, embd=0, n_seq_max=1)
        out = getattr(C, "llama_model_n_embd_out", None)  # a projection's size, where it has one
        self._dimensions = int(out(raw) if out else 0) or self._model.n_embd()
        self._n_vocab = self._model.n_vocab()
        log.info("[prism] embeddings: %s loaded, %d dimensions, %d tokens per input",
                 self.model_path.name, self._dimensions, self.n_ctx)

    def _free(self) -> None:
        for name in ("_batch", "_ctx", "_model"):
            obj = getattr(self, name)
            setattr(self, name, None)
            if obj is not None:
                obj.close()

    def _serve(self, group: list[_Request]) -> None:
        live: list[_Request] = []
        for req in group:
            try:
                req.tokens = [self._tokens(i, x) for i, x in enumerate(req.inputs)]
            except InputInvalid as e:
                req.future.set_exception(e)
                continue
            req.vectors = [None] * len(req.tokens)
            live.append(req)
        pending = [(req, i) for req in live for i in range(len(req.inputs))]
        try:
            while pending:
                take, used = 0, 0
                while take < len(pending) and take < self.n_seq_max:
                    req, i = pending[take]
                    n = len(req.tokens[i])
                    if used + n > self.n_ctx:
                        break
                    used += n
                    take += 1
                self._decode(pending[:take])
                pending = pending[take:]
        except Exception as e:  # a failed decode fails its requests only
            log.warning("[prism] embeddings: decoding failed: %s", e)
            for req in live:
                if not req.future.done():
                    req.future.set_exception(EmbedUnavailable(f"decoding failed: {e}"))
            return
        for req in live:
            req.future.set_result(Embedded(tuple(req.vectors),
                                           sum(len(t) for t in req.tokens)))

    def _tokens(self, index: int, item: Input) -> list[int]:
        if isinstance(item, str):
            if not item:
                raise InputInvalid(index, f"input[{index}] is empty")
            tokens = self._model.tokenize(item.encode("utf-8"), add_bos=True, special=False)
        else:
            tokens = list(item)
            bad = next((t for t in tokens if not 0 <= t < self._n_vocab), None)
            if bad is not None:
                raise InputInvalid(index, f"input[{index}] has the token id {bad}, outside this "
                                   f"model's vocabulary (0 to {self._n_vocab - 1})")
        if not tokens:
            raise InputInvalid(index, f"input[{index}] has no tokens")
        if len(tokens) > self.n_ctx:
            raise InputTooLong(index, len(tokens), self.n_ctx)
        return tokens

    def _decode(self, items: list[tuple[_Request, int]]) -> None:
        import llama_cpp as C

        self._ctx.kv_cache_clear()
        self._batch.reset()
        for seq, (req, i) in enumerate(items):
            self._batch.add_sequence(req.tokens[i], seq, True)  # every token an output: pooled
        self._ctx.decode(self._batch)
        n = self._dimensions
        for seq, (req, i) in enumerate(items):
            ptr = C.llama_get_embeddings_seq(self._ctx.ctx, seq)
            if not ptr:
                raise RuntimeError(f"llama.cpp pooled no embedding for sequence {seq}")
            vec = ptr[:n]  # a copy, as Python floats
            norm = math.sqrt(math.fsum(x * x for x in vec))
            req.vectors[i] = tuple(x / norm for x in vec) if norm > 0 else tuple(vec)
