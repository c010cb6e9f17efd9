"""LlamaEngine: one llama.cpp model serving up to N requests at once from one worker thread.

Owns the engine's public face and its worker loop. The model, its context and the N sequences
(engine/backends/llama/batch.py, engine/backends/llama/slots.py) are created, used and freed only
on the daemon worker thread ("prism-llama"), which admits waiting jobs into free slots, decodes one
batch per step for all of them, and calls each job's `on_token` / `on_finish` callbacks on that
thread. Other threads may call `submit`, `tokenize`, `detokenize`, `queue_depth`, `busy_slots`,
`state` and `close`. The queue / worker / cancel / close half (`QueuedEngine`) and the UTF-8 and
stop-string half (`StopGate`) live in engine/backends/queued.py, shared with
engine/record/replay.py.

Choices made on purpose (docs/design.md, sections 3 and 5):

- `parallel` sequences share one context, each with a KV cache of its own (`kv_unified=False`)
  or all in one pool of `n_ctx` cells (engine/backends/llama/kv_plan.py chooses for the app); jobs
  wait FIFO while every slot is busy (the server answers 429 past `--max-queue` waiting ones).
  `parallel=1` is the old one-at-a-time engine:
  same sampler chain, same KV reuse, same speed.
- Tokenizing from other threads goes through engine/backends/llama/vocab.py: a second, vocab-only
model
  behind its own lock (it never waits for a generation), linear in the text, with a cheap lower
  bound that refuses a prompt that cannot fit before tokenizing it (`tokenize(text, limit)`).
- Special tokens are detokenized without their text (llama-server's default): end-of-turn
  markers never leak into the output. Exactly the tokens in `preserved` (the pack's family
  lists them: gpt-oss's `<|channel|>`, Kimi's `<|tool_call_begin|>`) render as text. The
  end-of-generation token ends the job ("stop") and is neither reported nor counted.
- Probability mode costs ~0.4 ms a token for k=5..20 on the default model (n_vocab 49152,
  2-core box), against ~22 ms to decode one: under 2%.
- Threads: n_threads=None keeps llama-cpp-python's default (half the logical CPUs for decode,
  all of them for batches). On the 2-core dev box one decode thread gives ~40 tokens/s and
  holds up when other processes compete; two give ~55-64 when the machine is idle but collapse
  to ~10-20 under load (llama.cpp's threads spin-wait for each other). Note that a step
  decoding several sequences is a batch, so it uses the batch thread count.
- Timings: queue_ms = slot granted - submission; prompt_ms = slot granted to end of prompt
  decode (chunks shared with other sequences included); ttft_ms = first token - submission
  (what a client waits); decode_ms = end of prompt decode to last token.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from pathlib import Path

from engine.backends.base import Finish, Job, Timings
from engine.backends.llama.vocab import PromptTooLong, Vocab
from engine.backends.queued import GENERATING, IDLE, QueuedEngine, StopGate

__all__ = ["LlamaEngine", "PromptTooLong", "QueuedEngine", "StopGate"]

log = logging.getLogger("prism")


class LlamaEngine(QueuedEngine):
    """The Engine protocol over llama-cpp-python's low-level API. See the module docstring."""

    guards_calls = True  # it samples: a job's call guard runs here (guard.py)

    def __init__(
        self,
        model_path: Path | str,
        *,
        n_ctx: int = 4096,
        parallel: int = 1,
        n_gpu_layers: int = 0,
        n_threads: int | None = None,
        prefill_chunk: int | None = None,
        preserved: Sequence[str] = (),
        kv_unified: bool = True,
        verbose: bool = False,
        cache_dir: Path | str | None = None,
        cache_size: int | None = None,
        speculate: bool = False,
        flash_attn: str = "auto",
    ):
        self.model_path = Path(model_path)
        if not self.model_path.is_file():
            raise FileNotFoundError(f"model not found: {self.model_path}")
        if parallel < 1:
            raise ValueError(f"parallel must be at least 1, not {parallel}")
        self.name = self.model_path.stem
        self.n_ctx = n_ctx  # what one request may use (a pool is shared, never sliced)
        self.parallel = parallel
        self.kv_bytes = 0  # the KV cache's size, known once loaded
        # Raises here on a file that is no GGUF.
        self._vocab = Vocab(self.model_path, preserved=preserved)
        if self._vocab.preserved_texts:
            log.info("[prism] special tokens kept as text: %s",
                     " ".join(self._vocab.preserved_texts))
        self._batcher = None  # the worker thread's alone
        self._admitting: Job | None = None  # the job in Batcher.admit now (_job_done)
        self._options = {"n_ctx": n_ctx, "parallel": parallel, "n_gpu_layers": n_gpu_layers,
                         "n_threads": n_threads, "kv_unified": kv_unified, "verbose": verbose,
                         "flash_attn": flash_attn}
        if prefill_chunk:
            self._options["prefill_chunk"] = prefill_chunk
        if speculate:  # draftless n-gram speculation (engine/backends/llama/speculate.py)
            self._options["speculate"] = True
        # The disk prompt cache (engine/backends/llama/disk_cache.py); None: off.
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.cache_size = cache_size
        self._start_worker("prism-llama")

    # -- any thread ------------------------------------------------------------------------

    def tokenize(self, text: str, limit: int | None = None,
                 plain: Sequence[tuple[int, int]] = ()) -> list[int]:
        """The prompt's tokens. Any thread, never waits for a generation; linear in the text.
        With `limit`, raises PromptTooLong (a ValueError) once the prompt is known to have
        `limit` tokens or more, often before tokenizing it at all. Special tokens written
        inside the `plain` (start, end) spans stay text (--escape-special)."""
        return self._vocab.tokenize(text, limit, plain)

    @property
    def special_texts(self) -> tuple[str, ...]:
        """The texts of the vocabulary's special tokens (engine/chat/special.py marks them)."""
        return self._vocab.special_texts

    def detokenize(self, ids: Sequence[int]) -> str:
        return self._vocab.detokenize(ids)

    def busy_slots(self) -> int:
        """Sequences serving a job now (0..parallel)."""
        b = self._batcher
        return b.busy if b is not None else 0

    def close(self, timeout: float = 10.0) -> None:
        """Cancel the running and waiting jobs, stop the worker, free the model."""
        super().close(timeout)
        self._vocab.close()

    # -- worker thread ---------------------------------------------------------------------

    def _setup(self) -> None:
        from engine.backends.llama.batch import Batcher

        self._batcher = Batcher(self.model_path, self._vocab, self._job_done,
                                disk=self._open_disk_cache(), **self._options)
        self.kv_bytes = self._batcher.kv_bytes()
        b = self._batcher
        if b.kv_unified:
            log.info("[prism] context: %d tokens, shared by %d sequence%s (unified KV cache, "
                     "%.0f MiB)", b.n_cells, self.parallel, "s" if self.parallel > 1 else "",
                     self.kv_bytes / 2**20)
        else:
            log.info("[prism] context: %d tokens for each of %d sequences (split KV caches, "
                     "%.0f MiB)", b.n_ctx_seq, self.parallel, self.kv_bytes / 2**20)

    def _open_disk_cache(self):
        """The disk cache for this model and KV layout, or None (off, or its folder unusable:
        logged, and the engine serves without it)."""
        if self.cache_dir is None:
            return None
        import llama_cpp

        from engine.backends.llama.disk_cache import DEFAULT_SIZE, DiskCache, fingerprint

        o = self._options
        # Saved states load only into the same model and layout: llama.cpp refuses a split
        # cache's state in a unified pool (or another number of streams), so they are kept
        # apart, and the flash-attention setting decides how V is laid out.
        namespace = {"model": fingerprint(self.model_path), "llama_cpp": llama_cpp.__version__,
                     "kv": "unified" if o["kv_unified"] else f"split/{o['parallel']}",
                     "type_k": "f16", "type_v": "f16", "flash_attn": o["flash_attn"]}
        if self.cache_size == 0:  # --cache-size 0: no room at all is the cache switched off
            return None
        try:
            size = DEFAULT_SIZE if self.cache_size is None else self.cache_size
            cache = DiskCache(self.cache_dir, namespace, size)
        except OSError as e:
            log.warning("[prism] disk prompt cache off: %s", e)
            return None
        log.info("[prism] disk prompt cache: %s", cache.describe())
        return cache

    def _teardown(self) -> None:
        if self._batcher is not None:
            self._batcher.close()
            self._batcher = None

    def _job_done(self, job: Job, fin: Finish) -> None:
        if job is self._admitting and fin.reason == "error" and fin.status is None:
            # Refused at admission (a prompt longer than the context, a grammar llama.cpp
            # cannot parse): nothing of it ran, and the request is what was wrong, so the
            # server answers 400 (app/api/runs.py), not 500, streamed or not.
            fin = dataclasses.replace(fin, status=400)
        try:
            job.on_finish(fin)
        except Exception:
            log.exception("[prism] on_finish callback failed")
        finally:
            self._done(job)

    def _loop(self) -> None:
        b = self._batcher
        if b is None:  # the load failed: the plain loop answers every job with load_error
            super()._loop()
            return
        while True:
            while b.has_free_slot():
                job = self._take(block=not b.busy)
                if job is None:
                    if not b.busy:
                        return  # closed
                    break
                if self._closed:  # close() may have missed it between _take() and here
                    job.cancel()
                self._admitting = job
                try:
                    admitted = b.admit(job)
                except Exception as e:  # e.g. a prompt that cannot be tokenized
                    self._admitting = None  # a failure of ours, not the request's
                    self._fail_job(job, e)
                    continue
                finally:
                    self._admitting = None
                if not admitted:  # the pool has no room for its prompt yet
                    self._put_back(job)
                    break
            self.state = GENERATING if b.busy else IDLE
            if b.busy:
                try:
                    b.step()
                except Exception as e:  # a bug here must not kill the worker: end its jobs
                    log.exception("[prism] decode step failed")
                    b.fail_all(f"{type(e).__name__}: {e}")
            for job in self._take_cancelled():  # they leave the queue now, not at their turn
                self._job_done(job, Finish("cancelled", Timings(queue_ms=self._waited(job))))
            self.state = GENERATING if b.busy else IDLE

    def _fail_job(self, job: Job, e: Exception) -> None:
        log.warning("[prism] job failed: %s: %s", type(e).__name__, e)
        self._job_done(job, Finish("error", Timings(), f"{type(e).__name__}: {e}"))

    @staticmethod
    def _waited(job: Job) -> float:
        return (time.perf_counter() - job.submitted_at) * 1000.0 if job.submitted_at else 0.0
