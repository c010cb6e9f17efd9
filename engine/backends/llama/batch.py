"""Batcher: one llama.cpp context shared by N sequences, decoded one batch per step.

Owns the model's weights, the context (its KV cache), one `llama_batch` and the N `Slot`s
(engine/backends/llama/slots.py). It runs only on the engine's worker thread ("prism-llama"),
driven by engine/backends/llama/engine.py: `admit(job)` puts a job in a free slot, `step()` decodes
one batch and samples its rows (engine/backends/llama/sampled.py, which hands the step's tokens on
once all are drawn). Each step's batch holds one new token for every generating sequence plus
prompt chunks for sequences still in prefill, so a long prompt never stalls the others for more
than one chunk, and a cancel (checked before every step) ends one job without disturbing the others
(docs/design.md, sections 3 and 5; README, "The engine").

A cancel also stops a prompt chunk mid-decode, but only where that disturbs no one: a step that
carries no generating sequence arms llama.cpp's abort callback (engine/backends/llama/abort.py), so
when every job with tokens in it is cancelled `llama_decode` returns 2 within one graph node and
those jobs end "cancelled". llama.cpp drops the aborted ubatch's cells itself; each slot is also
cut back to what it had committed (`slot.kv`), so a retry reuses exactly the chunks that completed
(docs/design.md, section 11). Any other non-zero return is handled by `_decode_failed`.

The KV cache is either split (`kv_unified=False`: each sequence a cache of `n_ctx` cells of its
own, N times the memory) or llama.cpp's unified pool (one pool of `n_ctx` cells that the
sequences share, the memory of one). Both let one request use the whole context beside the
others (fixed slices of n_ctx / N would not let a long prompt in); engine/backends/llama/kv_plan.py
chooses for the app, split when N caches fit the memory budget. The pool's costs: every step attends
over every cell in use, so idle slots' caches slow the others down, and the pool can fill.
What a full pool does, in this order:
- idle slots' caches (kept only for reuse) are dropped, least recently used first;
- a new job whose prompt does not fit waits at the head of the queue (FIFO) until it does;
  prompt cells are reserved at admission, so a prefill always completes;
- when generating sequences need more cells than are left, the one holding the most ends
  with finish "length" and the reason in `Finish.error` (logged) — never a silent cut.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from engine.backends.base import Finish, Job, Timings, Token
from engine.backends.llama.abort import PrefillAbort
from engine.backends.llama.budget import BudgetClose
from engine.backends.llama.chunks import ChunkSizer
from engine.backends.llama.context import open_context
from engine.backends.llama.disk_cache import DiskCache
from engine.backends.llama.guard import CallGuard
from engine.backends.llama.reuse import DiskReuse, prefix_match
from engine.backends.llama.sampled import SampledTokens
from engine.backends.llama.slots import (
    Active,
    Sampler,
    Slot,
    common_prefix,
    now,
    pick_slot,
)
from engine.backends.llama.speculate import Drafter, SpeculativeSteps
from engine.backends.llama.vocab import Vocab, piece
from engine.backends.queued import StopGate

log = logging.getLogger("prism")

# The most prompt tokens per step while other sequences generate; engine/backends/llama/chunks.py
# makes it fewer where a token's share of a step is dear (a CPU), so they keep their pace.
PREFILL_CHUNK = 256
# Prompt tokens left that go in whole beside generating rows (step()). 48 could starve a burst:
# eight 62-token chats arriving 30 ms apart waited for the pacing while it had not timed its
# steps yet, the last one's first token 8 s after it came (1.5-1.7 s with 128); one step of 128
# tokens costs the generating rows a few hundred ms once, on this CPU.
SHORT_PROMPT = 128
SHARE_MIN = 64  # tokens of prefix worth copying another slot's split cache for (_borrow)


class Batcher(SpeculativeSteps, SampledTokens):
    """See the module docstring. `finish(job, Finish)` is called once per admitted job."""

    def __init__(
        self,
        model_path: Path,
        vocab: Vocab,
        finish: Callable[[Job, Finish], None],
        *,
        n_ctx: int,
        parallel: int,
        n_gpu_layers: int = 0,
        n_threads: int | None = None,
        prefill_chunk: int = PREFILL_CHUNK,
        kv_unified: bool = True,
        verbose: bool = False,
        disk: DiskCache | None = None,
        speculate: bool = False,
        flash_attn: str = "auto",
    ) -> None:
        import llama_cpp as C

        self.vocab = vocab
        self._path = model_path
        self._finish = finish
        self.sizer = ChunkSizer(prefill_chunk)  # how big a chunk beside generating rows
        self._model, self._ctx = open_context(
            model_path, n_ctx=n_ctx, parallel=parallel, n_gpu_layers=n_gpu_layers,
            n_threads=n_threads, kv_unified=kv_unified, verbose=verbose, flash_attn=flash_attn)
        self.ctx = self._ctx.ctx
        self._mem = C.llama_get_memory(self.ctx)
        self.kv_unified = kv_unified
        self.n_cells = int(C.llama_n_ctx(self.ctx))  # the pool, shared by every sequence
        self.n_ctx_seq = int(C.llama_n_ctx_seq(self.ctx))  # what one sequence may hold
        self.n_batch = int(C.llama_n_batch(self.ctx))
        self.n_vocab = vocab.n_vocab
        self._vocab_ptr = self._model.vocab
        self._batch = C.llama_batch_init(self.n_batch, 0, 1)
        self._eog = int(C.llama_vocab_eos(self._vocab_ptr))  # the guard's "call complete" probe
        self.slots = [Slot(seq) for seq in range(parallel)]
        # token id -> (end of generation?, its bytes): a vocabulary's facts, asked once each
        self._tokens: dict[int, tuple[bool, bytes]] = {}
        # Tokens sampled this step, not handed on yet (`_hand_on`): a job's own come before
        # its end, since `_end` hands on everything first.
        self._outbox: list[tuple[Active, Token]] = []
        self._order: list[Active] = []  # active jobs, in admission order
        self._abort = PrefillAbort(self.ctx)  # for prefill-only steps (module docstring)
        self.disk = disk  # engine/backends/llama/disk_cache.py; None: --no-disk-cache
        self.speculate = speculate  # draftless n-gram drafts (speculate.py): --speculate ngram
        self._reuse = DiskReuse(disk, self.ctx, self._mem) if disk is not None else None
        bos = vocab.bos if vocab.add_bos and vocab.bos >= 0 else None
        self._bos_text = piece(self._vocab_ptr, bos, True).decode("utf-8", "replace") if (
            bos is not None) else None

    # -- state ------------------------------------------------------------------------------

    @property
    def busy(self) -> int:
        return len(self._order)

    def has_free_slot(self) -> bool:
        return len(self._order) < len(self.slots)

    def kv_bytes(self) -> int:
        """The KV cache's size: every cell at engine/backends/llama/kv_plan.py's bytes per token (K
        and V in f16 over every layer, from the GGUF's metadata, per-layer head counts included)."""
        from engine.backends.llama.kv_plan import plan_context

        return (plan_context(self._path).kv_per_token or 0) * self.n_cells

    def _free_cells(self) -> int:
        if not self.kv_unified:  # each sequence has cells of its own: no pool to run out of
            return self.n_cells
        used = sum(len(s.kv) for s in self.slots)
        reserved = sum(a.remaining_prompt for a in self._order)
        return self.n_cells - used - reserved

    def _drop_idle(self, need: int, keep: Slot | None = None) -> bool:
        """Drop idle slots' caches (least recently used first) until `need` cells are free."""
        import llama_cpp as C

        for slot in sorted(self.slots, key=lambda s: s.used_at):
            if self._free_cells() >= need:
                break
            if slot.active is None and slot is not keep and slot.kv:
                if self._reuse is not None:
                    self._reuse.persist(slot)
                C.llama_memory_seq_rm(self._mem, slot.seq, 0, -1)
                slot.kv.clear()
        return self._free_cells() >= need

    # -- admission --------------------------------------------------------------------------

    def admit(self, job: Job) -> bool:
        """Start `job` in a free slot, or end it at once (cancelled, too long, bad grammar).
        False: the pool has no room for its prompt yet; the job must wait."""
        import llama_cpp as C

        start = now()
        queue_ms = (start - job.submitted_at) * 1000.0 if job.submitted_at else 0.0
        if job.cancelled.is_set():
            self._finish(job, Finish("cancelled", Timings(queue_ms=queue_ms)))
            return True
        prompt = list(job.prompt_ids) if job.prompt_ids else self.vocab.tokenize(job.prompt)
        n_prompt = len(prompt)
        if not 0 < n_prompt < self.n_ctx_seq:
            error = (f"prompt is {n_prompt} tokens; the context holds {self.n_ctx_seq}"
                     if n_prompt else "the prompt is empty")
            self._finish(job, Finish("error", Timings(queue_ms=queue_ms, prompt_tokens=n_prompt),
                                     error))
            return True
        free = [s for s in self.slots if s.active is None]
        busy = () if self.kv_unified else tuple(a.slot.seq for a in self._order)
        slot, common = pick_slot(free, prompt, busy)
        keep = min(common, n_prompt - 1)  # the last prompt token is decoded again: its logits
        if self._reuse is not None and keep < len(slot.kv) - 1:
            self._reuse.persist(slot)  # its cache is cut below: what goes is saved first
        # Its prompt's cells, less what its slot holds now (the tail past `keep` is dropped).
        if not self._drop_idle(n_prompt - len(slot.kv), keep=slot):
            if self._order:
                return False
            self._drop_idle(self.n_cells)  # alone and still short: its own cache goes too
            keep = 0
        try:
            sampler = Sampler(self._vocab_ptr, self.n_vocab, job.sampling, job.grammar)
        except ValueError as e:
            self._finish(job, Finish("error", Timings(queue_ms=queue_ms, prompt_tokens=n_prompt),
                                     str(e)))
            return True
        # Forensics before reuse changes what the slots hold: the best prefix anything cached.
        skip_bos = self._bos_text is not None and not job.prompt.startswith(self._bos_text)
        best = self.disk.best(prompt) if self.disk is not None else (None, 0)
        prefix = prefix_match(prompt, self.slots, best, self._vocab_ptr, skip_bos)
        if not self.kv_unified:
            keep = self._borrow(slot, prompt, keep)
        disk = 0
        if self._reuse is not None:
            free = self._free_cells() if self.kv_unified else None
            loaded = self._reuse.load(slot, prompt, best, keep, free)
            if loaded != keep:
                keep = disk = loaded
        if len(slot.kv) > keep:
            if not C.llama_memory_seq_rm(self._mem, slot.seq, keep, -1):
                C.llama_memory_seq_rm(self._mem, slot.seq, 0, -1)
                keep = 0
            del slot.kv[keep:]
        limit = self.n_ctx_seq - n_prompt  # llama.cpp cannot decode past the context
        if job.max_tokens is not None:
            limit = min(limit, job.max_tokens)
        a = Active(job, slot, prompt, sampler, StopGate(job.stop), limit, start, queue_ms, keep,
                   disk=disk, prefix=prefix)
        if self.speculate:
            a.drafter = Drafter(prompt)
        if job.guard is not None:  # the service gives none where a forced grammar binds the job
            a.guard = CallGuard(job.guard, self._vocab_ptr, self.n_vocab, self._eog)
        if job.budget is not None and job.grammar is None:  # budget.py: a grammar would refuse
            a.budget = BudgetClose(job.budget, self._close_tokens)
        slot.active = a
        job.slot = slot.seq
        self._order.append(a)
        if limit <= 0:
            self._end(a, "length")
        return True

    def _borrow(self, slot: Slot, prompt: list[int], keep: int) -> int:
        """Split caches: when another slot's cache, busy or idle, shares a prefix with the
        prompt at least SHARE_MIN tokens longer than `slot`'s own, copy it into `slot` and
        return the longer prefix to keep. A subagent sent with the main agent's system prompt
        and tools (Claude Code's: 7.6k tokens) then skips their prefill while the agent's own
        slot is busy. llama.cpp copies between split caches only whole (every cell of the
        source's stream, at the next decode): about one memcpy of a cache, against a prefill
        of thousands of tokens. The caller trims the copy to the prefix."""
        import llama_cpp as C

        donor, n = None, keep
        for other in self.slots:
            if other is not slot:
                m = min(common_prefix(other.kv, prompt), len(prompt) - 1)
                if m > n:
                    donor, n = other, m
        if donor is None or n - keep < SHARE_MIN:
            return keep
        C.llama_memory_seq_cp(self._mem, donor.seq, slot.seq, -1, -1)
        slot.kv[:] = donor.kv  # what its stream holds now, cut to `n` by the caller
        return n

    # -- one decode step --------------------------------------------------------------------

    def step(self) -> None:
        import llama_cpp as C

        for a in list(self._order):
            if a.job.cancelled.is_set():
                self._end(a, "cancelled")
        # Rows in sequence order, not admission order: with split caches llama.cpp decodes a
        # step whose rows come as sequences 1, 2, 3, 0 about 11% slower than 0, 1, 2, 3 (a
        # bare loop on the default model: 87 against 98 tokens/s; in the server 45 against
        # 39 ms a step of four). The unified pool does not care.
        generating = sorted((a for a in self._order if a.pending is not None),
                            key=lambda a: a.slot.seq)
        generating = self._make_room(generating)
        b = self._batch
        n = 0
        for a in generating:
            self._put(n, a.pending, len(a.slot.kv), a.slot.seq, True)
            a.row, n = n, n + 1
            if a.drafter is not None:  # speculate.py: its draft's rows right after it
                n = self._put_drafts(a, n)
        chunks: list[tuple[Active, list[int]]] = []
        # Beside generating rows the step's prompt tokens, all prefills' together, are as many
        # as keep those rows' pace (none on some steps: chunks.py).
        cap = self.sizer.cap() if generating else self.n_batch
        for a in self._order:
            if n >= self.n_batch:
                break
            if not a.prefilling:
                continue
            done = len(a.slot.kv)
            # A short prompt (a title request, a burst of chat turns) goes in whole whatever
            # the pace allows: a step of a few dozen more rows costs the generating ones little,
            # and it would otherwise wait steps for its turn (four chats would not run at once).
            short = len(a.prompt) - done <= SHORT_PROMPT
            if cap <= 0 and not short:
                continue
            chunk = a.prompt[done:done + min(max(cap, SHORT_PROMPT if short else 0),
                                             self.n_batch - n)]
            cap -= len(chunk)
            last = done + len(chunk) == len(a.prompt)
            for i, tok in enumerate(chunk):
                self._put(n + i, tok, done + i, a.slot.seq, last and i == len(chunk) - 1)
            a.row = n + len(chunk) - 1 if last else -1
            n += len(chunk)
            chunks.append((a, chunk))
        if n == 0:
            return
        b.n_tokens = n
        t0 = now()
        self._abort.arm(() if generating else (a.job.cancelled for a, _ in chunks))
        try:
            rc = C.llama_decode(self.ctx, b)
        finally:
            self._abort.disarm()
        if rc == 2:  # aborted: every job in this (prefill-only) step was cancelled
            self._aborted([a for a, _ in chunks])
            return
        if rc != 0:
            self._decode_failed(rc, generating + [a for a, _ in chunks])
            return
        t = now()
        for a in generating:
            a.slot.kv.append(a.pending)
            a.pending = None
        for a, chunk in chunks:
            a.slot.kv.extend(chunk)
        for a in generating:
            try:
                if a.drafter is None:  # one row: no draft to verify, none to keep count of
                    self._sampled(a, t)
                else:
                    self._verify(a, t)  # speculate.py: its rows in turn
            except Exception as e:  # a consumer's callback: that job ends, the others go on
                self._end(a, "error", f"{type(e).__name__}: {e}")
        for a in [a for a, _ in chunks if a.row >= 0]:
            try:
                self._sampled(a, t)
            except Exception as e:
                self._end(a, "error", f"{type(e).__name__}: {e}")
        # Timed to the last sample: a GPU's decode returns before its work is done.
        self.sizer.observe(len(generating), n - len(generating), now() - t0)
        self._hand_on()

    def _put(self, i: int, tok: int, pos: int, seq: int, logits: bool) -> None:
        b = self._batch
        b.token[i] = tok
        b.pos[i] = pos
        b.n_seq_id[i] = 1
        b.seq_id[i][0] = seq
        b.logits[i] = logits

    def _make_room(self, generating: list[Active]) -> list[Active]:
        """Cells for one more token per generating sequence; see the module docstring."""
        if self._free_cells() >= len(generating):  # every step with split caches
            return generating
        while generating and not self._drop_idle(len(generating)):
            victim = max(generating, key=lambda a: len(a.slot.kv))
            generating.remove(victim)
            self._end(victim, "length", self._full_reason())
        return generating

    def _full_reason(self) -> str:
        return (f"the context pool is full ({self.n_cells} tokens shared by "
                f"{len(self.slots)} sequences)")

    def _decode_failed(self, rc: int, batch: list[Active]) -> None:
        import llama_cpp as C

        if rc == 1 and batch:  # no room found (fragmentation): the biggest one makes room
            victim = max(batch, key=lambda a: len(a.slot.kv) + a.remaining_prompt)
            self._end(victim, "length" if victim.n_out else "error", self._full_reason())
            return
        for a in batch:  # part of the batch may be in the cache: forget these sequences
            C.llama_memory_seq_rm(self._mem, a.slot.seq, 0, -1)
            a.slot.kv.clear()
            self._end(a, "error", f"llama_decode failed ({rc})")

    # -- an aborted prefill-only step (abort.py) -----------------------------------------------

    def _aborted(self, batch: list[Active]) -> None:
        """`llama_decode` returned 2. Processed ubatches may remain in llama.cpp's memory:
        cut every sequence of the step back to what its slot had committed, so the slot's
        bookkeeping is what llama.cpp holds. The cancelled jobs end; any other (none, since
        the callback aborts only when all are cancelled) decodes its chunk again next step."""
        import llama_cpp as C

        for a in batch:
            if not C.llama_memory_seq_rm(self._mem, a.slot.seq, len(a.slot.kv), -1):
                C.llama_memory_seq_rm(self._mem, a.slot.seq, 0, -1)
                a.slot.kv.clear()
        for a in batch:
            if a.job.cancelled.is_set():
                log.info("[prism] prompt decode stopped: request cancelled after %d of %d "
                         "prompt tokens", len(a.slot.kv), len(a.prompt))
                self._end(a, "cancelled")

    # -- ending -----------------------------------------------------------------------------

    def _end(self, a: Active, reason: str, error: str | None = None) -> None:
        if a.finished:
            return
        if self._outbox:  # its tokens sampled this step go before its end
            self._hand_on()
            if a.finished:  # its consumer raised on one of them
                return
        a.finished = True
        self._order.remove(a)
        a.slot.active = None
        a.slot.used_at = now()
        a.sampler.close()
        if a.draft:  # ended inside a draft's verification: its cells past the kept tokens go
            import llama_cpp as C  # before anyone (a save, the caller's callback) sees the slot

            C.llama_memory_seq_rm(self._mem, a.slot.seq, len(a.slot.kv), -1)
        if a.guard is not None:
            a.guard.close()
        # A cancelled prefill is saved too: a client that gave up after minutes of it (Open
        # WebUI's tools prompt) finds the part that was done when it asks again.
        if self._reuse is not None and reason != "error":
            a.slot.unsaved = True  # DiskReuse.persist saves it, after the reply's end is out
        if error and reason == "length":
            log.warning("[prism] a request ended at %d tokens: %s", a.n_out, error)
        try:
            for out in a.gate.finish():
                a.job.on_token(out)
        except Exception as e:
            reason, error = "error", f"{type(e).__name__}: {e}"
        end = now()
        t_prompt = a.t_prompt or end
        timings = Timings(
            queue_ms=a.queue_ms,
            prompt_ms=(t_prompt - a.start) * 1000.0,
            ttft_ms=((a.t_first or end) - (a.job.submitted_at or a.start)) * 1000.0,
            decode_ms=(end - t_prompt) * 1000.0 if a.n_out else 0.0,
            prompt_tokens=len(a.prompt),
            cached_tokens=a.cached,
            output_tokens=a.n_out,
            slot=a.slot.seq,
            disk_tokens=a.disk,
            draft_tokens=a.drafted,
            accepted_tokens=a.kept,
        )
        self._finish(a.job, Finish(reason, timings, error, a.gate.hit, prefix=a.prefix))
        if self._reuse is not None and not self._order:  # the saves cost no one a step now
            self._reuse.persist_idle(self.slots)

    def fail_all(self, error: str) -> None:
        import llama_cpp as C

        for a in list(self._order):
            C.llama_memory_seq_rm(self._mem, a.slot.seq, 0, -1)
            a.slot.kv.clear()
            self._end(a, "error", error)

    def close(self) -> None:
        import llama_cpp as C

        for a in list(self._order):
            self._end(a, "cancelled")
        self._abort.close()
        if self._reuse is not None:  # what waited for an idle moment is saved before we go
            self._reuse.persist_idle(self.slots)
        if self.disk is not None:
            self.disk.close()  # the queued saves are written before the process goes
        if self._batch is not None:
            C.llama_batch_free(self._batch)
            self._batch = None
        self._ctx.close()
        self._model.close()
