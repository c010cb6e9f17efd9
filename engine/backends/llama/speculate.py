"""Draftless speculation: draft tokens looked up in the sequence's own text (prompt lookup).

Owns `Drafter`, one per speculating job (issue 23; README, "Speculative decoding"). An agent's
edit turn rewrites a file it was just shown, a summary quotes its source: the next tokens are
often a copy of an earlier stretch. The drafter indexes every n-gram of the prompt and of what
the job generated; when the last `n` tokens were seen before, the tokens that followed them
there are the draft. engine/backends/llama/batch.py puts the draft in the same step as the
sequence's next token (one row each, beside the other sequences' rows) and verifies it by
sampling each row in turn with the job's own chain: a draft token is kept only where the
sampler drew exactly it, so greedy output is the output without speculation and sampled output
keeps its distribution (each token is still one draw of the job's sampler given the tokens
before it). Runs on the engine's worker thread ("prism-llama") only.

How long a draft is: `max_draft` at most, and as long as the recent acceptance earns: after a
step, the length follows what was accepted (one more than accepted on a full accept, back to
what was accepted otherwise), so a stretch of prose that matches nothing costs nothing and a
copied stretch runs at the longest draft. A look-up needs a match of `n` tokens (3 by default):
shorter matches ("of the") are mostly wrong and cost a row each.
"""

from __future__ import annotations

from collections.abc import Iterable

DEFAULT_N = 3
DEFAULT_MAX = 8


class Drafter:
    """See the module docstring. `extend` as tokens become known; `draft()` before a step;
    `accepted(k)` after it."""

    def __init__(self, tokens: Iterable[int] = (), n: int = DEFAULT_N,
                 max_draft: int = DEFAULT_MAX) -> None:
        self.n = n
        self.max_draft = max_draft
        self.length = max_draft  # the next draft's length (adapts to acceptance)
        self.tokens: list[int] = []
        self._last: dict[tuple[int, ...], int] = {}  # n-gram -> where it last ended (exclusive)
        self.drafted = 0  # draft tokens put in steps
        self.hits = 0  # of those, accepted
        self.extend(tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        toks, n, last = self.tokens, self.n, self._last
        for t in tokens:
            toks.append(t)
            # Index the n-gram that ends one before the end, so a look-up of the newest n-gram
            # finds an earlier occurrence, never itself.
            end = len(toks) - 1
            if end >= n:
                last[tuple(toks[end - n:end])] = end

    def draft(self) -> list[int]:
        """Tokens to try after the sequence's current last token; [] when nothing matches."""
        toks, n = self.tokens, self.n
        if len(toks) < n or self.length <= 0:
            return []
        at = self._last.get(tuple(toks[-n:]))
        if at is None:
            return []
        out = toks[at:at + self.length]
        self.drafted += len(out)
        return out

    def accepted(self, k: int, of: int) -> None:
        """`k` of the `of` draft tokens of the last step were kept."""
        self.hits += k
        if of:
            self.length = min(self.max_draft, k + 1) if k == of else max(k, 1)

    @property
    def rate(self) -> float:
        return self.hits / self.drafted if self.drafted else 0.0


class SpeculativeSteps:
    """The Batcher's speculative half (a mixin: it reads and sets the Batcher's fields, and
    calls its `_put`, `_sampled` and `_free_cells`). Same thread as the Batcher."""

    def _put_drafts(self, a, n: int) -> int:
        """After `a`'s pending row at batch row `n - 1`: its draft's rows, each with logits;
        the next free row. No draft for a job bound by a grammar of its own (a forced call, a
        response format: its sampler could not take a draft token back) or with no room."""
        a.draft, a.rows = [], [a.row]
        d = a.drafter
        if d is None or a.job.grammar is not None:
            return n
        pos = len(a.slot.kv) + 1  # the pending token sits at len(kv)
        room = min(self.n_batch - n, a.limit - a.n_out - 1, self.n_ctx_seq - pos - 1)
        if self.kv_unified:  # a pool: leave a batch's worth of cells to everyone else
            room = min(room, self._free_cells() - self.n_batch)
        draft = d.draft()[:max(room, 0)]
        for i, tok in enumerate(draft):
            self._put(n + i, tok, pos + i, a.slot.seq, True)
        a.draft, a.rows = draft, [a.row, *range(n, n + len(draft))]
        return n + len(draft)

    def _verify(self, a, t: float) -> None:
        """Sample `a`'s rows in turn: keep each draft token the sampler drew, stop at the first
        it did not (that draw is the next pending token), then drop the cells of the draft
        tokens not kept so the slot's cache is exactly its tokens."""
        import llama_cpp as C

        draft, kept = a.draft, 0
        for i, row in enumerate(a.rows):
            a.row = row
            if not self._sampled(a, t):
                break  # the job ended (end of generation, a stop string, its limit)
            if i < len(draft) and a.pending == draft[i]:
                a.slot.kv.append(a.pending)  # its cell, decoded this step, holds exactly it
                a.pending = None
                kept += 1
                continue
            break
        if draft:
            C.llama_memory_seq_rm(self._mem, a.slot.seq, len(a.slot.kv), -1)
            a.drafter.accepted(kept, len(draft))
            a.drafted += len(draft)
            a.kept += kept
        a.draft = []
