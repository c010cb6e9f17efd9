"""How many prompt tokens a decode step may carry beside generating sequences (issue 24, item 5).

Owns `ChunkSizer`, which engine/backends/llama/batch.py's `Batcher.step()` asks for the chunk
size and tells how long each step took. Engine thread only ("prism-llama"), no locks.

Why: a generating sequence gets one token per step, so a step that also decodes a prompt chunk
makes it wait for the whole chunk. With a fixed 256-token chunk, opencode's title request
decoded at 0.5 tokens/s beside its 7.4k-token prompt, on a CPU where it decodes at 40 alone.
How long a chunk costs depends on the machine: on a CPU a step's time grows with every token in
it, on a GPU a step of 256 tokens costs little more than a step of one. So the size is measured,
not fixed: a step's time is close to linear in its tokens, t(n) = a + b·n (a: one pass over the
weights and the threads' hand-off; b: each token's share), and the sizer fits a and b by least
squares to the steps it has timed, the recent ones weighted most (prefill-only steps, generating
ones and mixed ones all count: they differ in n, which is what makes the line). A step with g
generating rows and k prompt tokens then costs (a + b(g + k)) / (a + b·g) times the step without
the chunk; the chunk is the largest k that keeps this under `FAIR_STEP`, between `MIN_CHUNK` and
the caller's maximum (`PREFILL_CHUNK`). Until two different step sizes have been timed it is the
maximum.

What the prefill loses: beside a generating sequence it runs one step per generated token, and
each step pays the overhead `a` whatever the chunk; over the short request's life that is about
the short request's own time alone, the same for any small chunk (`bench/fairness.py`).
"""

from __future__ import annotations

FAIR_STEP = 1.5  # a step with a chunk may cost at most this many times one without it
MIN_CHUNK = 4  # tokens: a prefill always progresses, however slow a token is
DECAY = 0.98  # weight of the previous fit per timed step (about 35 steps' half-life)


class ChunkSizer:
    """`cap(generating)`: prompt tokens allowed in a step beside `generating` rows;
    `observe(n, seconds)`: a decoded step of `n` tokens took that long."""

    def __init__(self, max_chunk: int, *, fair: float | None = FAIR_STEP,
                 min_chunk: int = MIN_CHUNK) -> None:
        self.max_chunk = max_chunk
        self.fair = fair  # None: always `max_chunk` (the fixed chunk before issue 24)
        self.min_chunk = min(min_chunk, max_chunk)
        # Decayed sums of weights, n, n², t and n·t: the weighted least-squares line.
        self._w = self._n = self._nn = self._t = self._nt = 0.0

    def observe(self, n: int, seconds: float) -> None:
        d = DECAY
        self._w = self._w * d + 1.0
        self._n = self._n * d + n
        self._nn = self._nn * d + n * n
        self._t = self._t * d + seconds
        self._nt = self._nt * d + n * seconds

    def line(self) -> tuple[float, float] | None:
        """(a, b) of t(n) = a + b·n, or None while the steps timed are all of one size."""
        det = self._w * self._nn - self._n * self._n
        if det <= 1e-9 * self._w * self._nn:
            return None
        b = (self._w * self._nt - self._n * self._t) / det
        a = (self._t - b * self._n) / self._w
        return a, b

    def cap(self, generating: int) -> int:
        if self.fair is None:
            return self.max_chunk
        fit = self.line()
        if fit is None:
            return self.max_chunk
        a, b = fit
        if b <= 0.0:  # tokens cost nothing measurable (a GPU): the step's overhead is all
            return self.max_chunk
        k = (self.fair - 1.0) * (max(a, 0.0) / b + generating)
        return max(self.min_chunk, min(self.max_chunk, int(k)))
