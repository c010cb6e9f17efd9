"""The reasoning budget on the llama engine: the family's close, forced into the generation.

Owns `BudgetClose`, one per job that has a reasoning budget (README, "Thinking budget"). The
service hands the job a `Budget` (engine/backends/base.py; engine/chat/budget.py) that knows,
from the job's own parser, whether the reasoning is open and how many tokens it holds. Before
each token is drawn, `Batcher._sampled` asks `next_forced()`: once the budget is spent, the
close text (the family writer's `reasoning_close`, and its `answer_open` where the answer is
opened, as Harmony's final channel) is tokenized and its tokens are taken one per step instead
of sampling, as if the model had drawn them: each is accepted by the job's sampler chain (its
repeat penalty sees it), delivered with a `forced` mark (the pipeline shows a
`reasoning_budget` event, the recorder keeps the mark) and decoded like any sampled token, so
the model goes on with its answer after them. The same path as the call guard's
(engine/backends/llama/guard.py): the token is chosen in `_sampled`, on the engine thread
("prism-llama"), and no other sequence of the batch is touched.

A job bound by a grammar of its own (a forced call, a response format) gets no budget: its
grammar would refuse the close, and llama.cpp aborts on a token its grammar rejects. Budget 0
with a prompt that opens the reasoning forces the close before the first sampled token.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.backends.base import Budget


class BudgetClose:
    """One job's budget: `next_forced(held)` gives the next token to take instead of
    sampling, or None to sample. `tokenize` turns the close text into tokens (no BOS)."""

    def __init__(self, budget: Budget, tokenize: Callable[[str], list[int]]) -> None:
        self.budget = budget
        self._tokenize = tokenize
        self._queue: list[int] = []
        # After a close, the parser must be seen out of the reasoning before another: until
        # the stop gate releases the close, the parser has not read it.
        self._armed = True
        self.closes = 0  # closes forced (a reasoning the model reopens is closed again)

    def next_forced(self, held: int = 0) -> int | None:
        """The token to append now, or None. `held`: tokens not yet delivered to the parser
        (the stop gate's), counted as reasoning so the budget is never exceeded."""
        if not self._queue:
            if not self.budget.spent(held):
                self._armed = True
                return None
            if not self._armed:
                return None
            self._armed = False
            self._queue = self._tokenize(self.budget.close)
            if not self._queue:  # an empty close cannot end anything: never ask again
                self.budget = _Never()
                return None
            self.closes += 1
        return self._queue.pop(0)


class _Never:
    close = ""

    def spent(self, held: int = 0) -> bool:
        return False
