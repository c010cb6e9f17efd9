"""How many prompt tokens a decode step may carry beside generating sequences (issue 24, item 5).

Owns `ChunkSizer`, which engine/backends/llama/batch.py's `Batcher.step()` asks for the chunk
size and tells how long each step took. Engine thread only ("prism-llama"), no locks.

Why: a generating sequence gets one token per step, so a step that also decodes a prompt chunk
makes it wait for the whole chunk. With a fixed 256-token chunk, opencode's title request
decoded at 0.5 tokens/s beside its 7.4k-token prompt, on a CPU where it decodes at 40 alone.
What a chunk costs depends on the machine, so it is measured, not fixed:

- *Its size.* A step's time is close to linear in its tokens, t(n) = a + b·n (a: a pass over
  the weights and the threads' hand-offs; b: each token's share). The sizer fits a and b by
  least squares to the steps it timed, the recent ones weighted most (prefill-only, generating
  and mixed steps differ in n, which is what draws the line). A chunk of k tokens makes a step
  b·k longer than the generating rows' own step, and the generating rows may be `FAIR_STEP`
  times slower than alone: k = (FAIR_STEP - 1)·t_gen / b, plus what the budget below saved,
  between `MIN_CHUNK` and the caller's maximum (`PREFILL_CHUNK`). On a GPU, where a step of
  256 tokens costs little more than a step of one, that is the maximum; on a CPU a few tokens.
- *Whether a step carries one at all.* A budget in seconds: each step with generating rows
  earns FAIR_STEP times their lone step's time (`t_gen`, timed on the steps that carry no
  chunk) and spends what it took. A step that went over (a token dearer than the line says: a
  loaded machine, where llama.cpp's batch threads wait on each other) is paid back by steps
  without a chunk, so over any stretch the generating rows keep 1/FAIR_STEP of their lone pace,
  whatever a chunk costs. When even `MIN_CHUNK` tokens cost more than one step's allowance the
  steps between chunks save up for one; beyond that nothing is saved, so a prefill that starts
  after a long generation does not take many steps' time in one.

The first step with generating rows carries no chunk, to time t_gen, and until two step sizes
have been timed a chunk is `MIN_CHUNK` tokens. What the prefill loses
beside a generating sequence is about that sequence's own time alone, for any chunk size: each
of its steps pays the overhead `a` again (`bench/fairness.py` measures both).
"""

from __future__ import annotations

FAIR_STEP = 1.5  # generating rows beside a prefill may be at most this many times slower
MIN_CHUNK = 4  # tokens: a step that carries a chunk carries at least this many
DECAY = 0.98  # weight of the previous fit per timed step (about 35 steps' half-life)
GEN_EMA = 0.25  # weight of the newest step without a chunk in `t_gen`


class ChunkSizer:
    """`cap()`: prompt tokens the next step beside generating rows may carry (0: none this
    step); `observe(generating, chunk, seconds)`: a step of `generating` rows and `chunk`
    prompt tokens took that long."""

    def __init__(self, max_chunk: int, *, fair: float | None = FAIR_STEP,
                 min_chunk: int = MIN_CHUNK) -> None:
        self.max_chunk = max_chunk
        self.fair = fair  # None: always `max_chunk` (the fixed chunk before issue 24)
        self.min_chunk = min(min_chunk, max_chunk)
        self.t_gen: float | None = None  # seconds of a step of the generating rows alone
        self.budget = 0.0  # seconds the generating rows may still lose to chunks
        # Decayed sums of weights, n, n², t and n·t: the weighted least-squares line.
        self._w = self._n = self._nn = self._t = self._nt = 0.0

    def observe(self, generating: int, chunk: int, seconds: float) -> None:
        n, d = generating + chunk, DECAY
        self._w = self._w * d + 1.0
        self._n = self._n * d + n
        self._nn = self._nn * d + n * n
        self._t = self._t * d + seconds
        self._nt = self._nt * d + n * seconds
        if not generating or self.fair is None:
            return
        if not chunk:
            self.t_gen = seconds if self.t_gen is None else (
                self.t_gen + GEN_EMA * (seconds - self.t_gen))
        if self.t_gen is not None:
            # Saved: one step's allowance, or what the smallest chunk costs if that is more
            # (a token dearer than a step's allowance: then chunks come every few steps).
            fit = self.line()
            smallest = fit[1] * self.min_chunk if fit is not None else 0.0
            self.budget = min(self.budget + self.fair * self.t_gen - seconds,
                              max((self.fair - 1.0) * self.t_gen, smallest))

    def line(self) -> tuple[float, float] | None:
        """(a, b) of t(n) = a + b·n, or None while the steps timed are all of one size."""
        det = self._w * self._nn - self._n * self._n
        if det <= 1e-9 * self._w * self._nn:
            return None
        b = (self._w * self._nt - self._n * self._t) / det
        a = (self._t - b * self._n) / self._w
        return a, b

    def cap(self) -> int:
        if self.fair is None:
            return self.max_chunk
        if self.t_gen is None or self.budget < 0.0:
            return 0  # time the rows alone first; or pay back a step that went over
        fit = self.line()
        if fit is None:  # one step size timed: a small chunk draws the line cheaply
            return self.min_chunk
        if fit[1] <= 0.0:  # a token costs nothing measurable (a GPU)
            return self.max_chunk
        # What this step may spend: the budget saved and its own allowance.
        k = int((self.budget + (self.fair - 1.0) * self.t_gen) / fit[1])
        if k < self.min_chunk:
            return 0  # save up for the smallest chunk over the next steps
        return min(self.max_chunk, k)
