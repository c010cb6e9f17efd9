"""Chat Completions `logprobs`: the reply's content tokens in OpenAI's chat shape.

Owns `MAX_TOP_LOGPROBS`, `engine_top` (how many alternatives to ask the engine for) and
`ContentTokens` (the tokens that began inside the content, each as `{"token", "logprob",
"bytes", "top_logprobs": [{"token", "logprob", "bytes"}...]}`). A token's own logprob is known
when it is among the alternatives the engine recorded (with greedy sampling it always is), else
null, as /v1/completions reports it (app/api/completions.py). Reasoning, call markup and call
arguments are not content and are not listed, as OpenAI lists only `choices[].logprobs.content`.
Runs on the asyncio loop's thread, reading the tokens the engine's thread appended before the
events that cover them were published (engine/service.py).
"""

from __future__ import annotations

from typing import Any

from engine.backends.base import Token

MAX_TOP_LOGPROBS = 20  # OpenAI's bound, and /v1/completions' own


def engine_top(logprobs: bool, top_logprobs: int) -> int:
    """Alternatives to ask the engine for: at least one, so each token's own logprob is
    known (the sampled token is the most likely one under greedy sampling)."""
    return max(1, top_logprobs) if logprobs else 0


def entry(tok: Token, k: int) -> dict[str, Any]:
    top = dict(tok.top)
    return {"token": tok.text, "logprob": top.get(tok.text),
            "bytes": list(tok.text.encode("utf-8")),
            "top_logprobs": [{"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}
                             for text, lp in tok.top[:k]]}


class ContentTokens:
    """Walks a run's tokens in output order: `within(span)` gives the entries of the tokens
    that begin inside that content span and were not given yet (spans come in order)."""

    def __init__(self, tokens: list[Token], k: int) -> None:
        self._tokens = tokens
        self._k = k
        self._i = 0
        self._pos = 0  # where token _i begins in the output

    def within(self, span: tuple[int, int]) -> list[dict[str, Any]]:
        start, end = span
        out = []
        while self._i < len(self._tokens) and self._pos < end:
            tok = self._tokens[self._i]
            begins = self._pos
            self._pos += len(tok.text)
            self._i += 1
            if tok.text and begins >= start:
                out.append(entry(tok, self._k))
        return out
