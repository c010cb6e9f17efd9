"""The thinking budget of a request: how many tokens its reasoning may hold, and how it ends.

Owns `EFFORT_BUDGETS` (OpenAI's `reasoning_effort` levels as budgets), `budget_of` (a
request's budget: its own, else the server's `--reasoning-budget`), `close_text` (what ends a
family's reasoning: its writer's `reasoning_close`, then its `answer_open`) and `RunBudget`,
the `Budget` a job carries (engine/backends/base.py). docs/engine/thinking-budget.md.

`RunBudget` is built on the service's thread and asked on the engine thread ("prism-llama"),
before each token is drawn, where the run's pipeline (engine/pipeline.py) is fed: it reads the
parser's state and the pipeline's count of reasoning tokens (those the parser assigned to the
reasoning; the forced close is markup, never counted), so the reasoning channel holds at most
the budget's tokens. Engines that cannot force a token (a replay, an upstream) never ask it.
"""

from __future__ import annotations

from typing import Any

from engine.parse import families

# OpenAI's reasoning_effort (and the Responses API's reasoning.effort) as a budget of reasoning
# tokens. "none" is no reasoning at all; the levels follow the ratios llama.cpp's and the
# hosted APIs' documentation suggest for small local models (a few hundred tokens to think a
# little, a few thousand to think it through); "high" and above set no budget: think as long as
# the model does, up to max_tokens.
EFFORT_BUDGETS: dict[str, int | None] = {
    "none": 0,
    "minimal": 256,
    "low": 1024,
    "medium": 4096,
    "high": None,
    "xhigh": None,
}


def effort_budget(effort: str | None) -> int | None:
    """The budget an effort level stands for (None: no budget, or no effort given)."""
    return EFFORT_BUDGETS.get(effort) if effort else None


def budget_of(request: Any, default: int | None) -> int | None:
    """A request's budget: its `reasoning_budget`, else the server's default (None: none;
    a negative budget is none too, as llama.cpp's -1)."""
    n = request.reasoning_budget if request.reasoning_budget is not None else default
    return None if n is None or n < 0 else int(n)


def close_text(family: str) -> str:
    """What the family's model writes to end its reasoning and begin the answer ("" for a
    family without reasoning markers). `auto` reads as the qwen-xml family, as start_state."""
    fam = families.get(family) or families.get("qwen-xml")
    if fam is None or fam.reasoning is None or not fam.writer.reasoning_close:
        return ""
    return fam.writer.reasoning_close + fam.writer.answer_open


class RunBudget:
    """One run's budget (`Budget` protocol): `tokens`, the budget; `close`, the family's
    close; `pipeline`, the run's TokenPipeline (its parser state and reasoning count)."""

    def __init__(self, tokens: int, close: str, pipeline: Any) -> None:
        self.tokens = tokens
        self.close = close
        self._pipeline = pipeline

    def spent(self, held: int = 0) -> bool:
        p = self._pipeline
        return p.parser.state == "reasoning" and p.reasoning_tokens + held >= self.tokens
