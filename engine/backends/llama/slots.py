"""Slots: llama.cpp sequences, what each one holds, and the job it serves.

Owns `Slot` (one sequence id of the shared context: the tokens whose K/V it holds), `Active`
(one job being served in a slot: its prompt, sampler chain, stop gate, counters and clocks),
`Sampler` (one llama.cpp sampler chain per job) and `pick_slot` (which free slot a prompt goes
to). Everything here runs on the engine's worker thread ("prism-llama");
engine/backends/llama/batch.py drives it, one decode step at a time.

- KV reuse is per slot: a new prompt goes to the free slot whose cached tokens share the
  longest prefix with it, as llama-server does, so a multi-turn agent keeps its cache while a
  title request runs beside it; but only when that throws away no more of the slot's cache
  than it reuses (llama-server's similarity threshold, 0.5, plays the same part), else to an
  empty slot (with split caches the one nearest the busy sequences: llama.cpp attends over the
  whole span of them), else to the least recently used one. The slot keeps that
  prefix and decodes only the rest, so `Timings.cached_tokens` is measured, not predicted.
  A fully cached prompt still decodes its last token again: sampling needs its logits.
- The sampler chain is llama-cpp-python's own (`Llama._init_sampler`), so a seeded request
  samples the same tokens as before slots existed: repeat penalty over the last 64 generated
  tokens, grammar, then greedy at temperature 0, else top-k, typical (off), top-p, min-p,
  temperature and a seeded draw.
- Probability mode reads the logits row of this slot's token in the last batch through
  `llama_get_logits_ith` (no `logits_all`, which would keep n_ctx x n_vocab floats).
  Log-probabilities are of the raw logits (before temperature and the other samplers, like
  OpenAI's logprobs); ranked with `argpartition`, only the k kept are normalised.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.backends.base import Job, PrefixMatch
from engine.backends.llama.budget import BudgetClose
from engine.backends.llama.guard import CallGuard
from engine.backends.llama.speculate import Drafter
from engine.backends.llama.vocab import piece
from engine.backends.queued import StopGate
from engine.chat.request import Sampling

PENALTY_LAST_N = 64  # llama-cpp-python's last_n_tokens_size default


class Sampler:
    """One llama.cpp sampler chain; `sample` applies it to a logits row and accepts the token."""

    def __init__(self, vocab: Any, n_vocab: int, s: Sampling, grammar: str | None) -> None:
        import llama_cpp as C

        self._ptr = C.llama_sampler_chain_init(C.llama_sampler_chain_default_params())
        add = lambda smpl: C.llama_sampler_chain_add(self._ptr, smpl)  # noqa: E731
        add(C.llama_sampler_init_penalties(n_vocab, PENALTY_LAST_N, s.repeat_penalty, 0.0, 0.0))
        if grammar is not None:
            g = C.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
            if not g:  # a NULL sampler in the chain would crash the process
                self.close()
                raise ValueError("invalid GBNF grammar (llama.cpp could not parse it)")
            add(g)
        seed = s.seed if s.seed is not None else C.LLAMA_DEFAULT_SEED
        if s.temperature < 0.0:
            add(C.llama_sampler_init_dist(seed))
        elif s.temperature == 0.0:
            add(C.llama_sampler_init_greedy())
        else:
            add(C.llama_sampler_init_top_k(s.top_k))
            add(C.llama_sampler_init_typical(1.0, 1))
            add(C.llama_sampler_init_top_p(s.top_p, 1))
            add(C.llama_sampler_init_min_p(s.min_p, 1))
            add(C.llama_sampler_init_temp(s.temperature))
            add(C.llama_sampler_init_dist(seed))

    @property
    def ptr(self) -> Any:
        """The chain (engine/backends/llama/guard.py draws with it under a call's grammar)."""
        return self._ptr

    def sample(self, ctx: Any, row: int) -> int:
        import llama_cpp as C

        return int(C.llama_sampler_sample(self._ptr, ctx, row))

    def close(self) -> None:
        import llama_cpp as C

        if self._ptr is not None:
            C.llama_sampler_free(self._ptr)  # frees the samplers added to the chain too
            self._ptr = None


@dataclass(eq=False)
class Slot:
    """One sequence of the shared context. `kv[i]` is the token at position i of its cache."""

    seq: int
    kv: list[int] = field(default_factory=list)
    used_at: float = 0.0  # when its last job ended (LRU among idle slots)
    active: Active | None = None
    unsaved: bool = False  # its last job's state is not on disk yet (reuse.py `persist`)


@dataclass(eq=False)
class Active:
    """A job in a slot. Prefill while `len(slot.kv) < len(prompt)`, then generating: each
    step decodes `pending` (the token sampled last) and samples the next one."""

    job: Job
    slot: Slot
    prompt: list[int]
    sampler: Sampler
    gate: StopGate
    limit: int  # most tokens it may generate
    start: float  # when it got its slot
    queue_ms: float
    cached: int  # prompt tokens reused from the slot's cache
    pending: int | None = None
    n_out: int = 0
    t_prompt: float = 0.0  # when its prompt's last chunk was decoded
    t_first: float = 0.0
    row: int = -1  # its logits row in the batch being decoded (-1: none)
    finished: bool = False  # on_finish was called
    disk: int = 0  # of `cached`, the prompt tokens loaded from the disk cache
    guard: CallGuard | None = None  # guarded calls (guard.py); None: not asked, or a grammar
    output: bytearray = field(default_factory=bytearray)  # generated bytes, for the guard
    budget: BudgetClose | None = None  # the reasoning budget (budget.py); None: none
    drafter: Drafter | None = None  # speculation (speculate.py); None: off
    draft: list[int] = field(default_factory=list)  # this step's draft tokens
    rows: list[int] = field(default_factory=list)  # this step's rows: pending's, then drafts'
    drafted: int = 0  # draft tokens put in steps
    kept: int = 0  # of those, accepted
    prefix: PrefixMatch | None = None  # where its prompt left the caches (reuse.py)

    @property
    def prefilling(self) -> bool:
        return self.pending is None and len(self.slot.kv) < len(self.prompt)

    @property
    def remaining_prompt(self) -> int:
        return len(self.prompt) - len(self.slot.kv) if self.pending is None else 0


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # the common case (an extended prompt): one C-level comparison
        return n
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def pick_slot(free: list[Slot], prompt: list[int],
              busy: tuple[int, ...] = ()) -> tuple[Slot, int]:
    """The free slot for `prompt`, and the prefix of its cache that `prompt` reuses.

    The slot whose cache shares the longest prefix with the prompt, if taking it over throws
    away no more than it reuses (a shared system prompt must not evict a long conversation
    that an empty slot could have spared). Else an empty slot: with split caches the one
    nearest the `busy` sequences, since llama.cpp attends over every stream from the lowest
    busy sequence to the highest (four jobs on sequences 1, 4, 6 and 7 of eight decode ~20%
    slower than on 0-3; bench/concurrency.py). Else the least recently used slot, wherever it
    is: a conversation's cache is worth more than a compact span (its re-prefill costs more
    than the span's slower steps), so an agent keeps its cache beside a title request.
    """
    lru = sorted(free, key=lambda s: s.used_at)
    best, best_n = None, 0
    for slot in lru:
        n = common_prefix(slot.kv, prompt)
        if n > best_n and 2 * n >= len(slot.kv):
            best, best_n = slot, n
    if best is None:
        lo, hi = (min(busy), max(busy)) if busy else (0, 0)

        def widens(s: Slot) -> int:
            return max(0, lo - s.seq, s.seq - hi) if busy and not s.kv else 0

        best = min(lru, key=lambda s: (bool(s.kv), widens(s)))  # min() keeps the LRU order
        best_n = common_prefix(best.kv, prompt)
    return best, best_n


def top_logprobs(ctx: Any, vocab: Any, n_vocab: int, row: int,
                 k: int) -> tuple[tuple[str, float], ...]:
    """The k most likely tokens at batch row `row` of the last decode, as (text, logprob)."""
    import llama_cpp as C

    ptr = C.llama_get_logits_ith(ctx, row)
    logits = np.ctypeslib.as_array(ptr, shape=(n_vocab,))  # a view: llama.cpp owns it
    k = min(k, n_vocab)
    # Log-softmax is monotonic, so rank the raw logits and normalise only the k we keep.
    idx = np.argpartition(logits, n_vocab - k)[n_vocab - k:]
    idx = idx[np.argsort(-logits[idx], kind="stable")]
    m = float(logits.max())
    log_z = m + float(np.log(np.exp(logits - m, dtype=np.float32).sum(dtype=np.float64)))
    return tuple(
        (piece(vocab, int(i)).decode("utf-8", "replace"), float(logits[i]) - log_z) for i in idx
    )


def now() -> float:
    return time.perf_counter()
