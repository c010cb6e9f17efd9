"""A step's sampled tokens: drawn, checked, and handed on to their jobs' consumers.

Owns `SampledTokens`, the Batcher's per-token half (a mixin: it reads and sets the Batcher's
fields, engine/backends/llama/batch.py, and calls its `_end`): `_sampled` draws a job's token at
its batch row (the reasoning budget's forced close, engine/backends/llama/budget.py, the call
guard's grammar, engine/backends/llama/guard.py, or the job's own chain), asks the vocabulary
once per token id whether it ends the generation and what its bytes are, reads the top-k
alternatives only for a job that asked for them, and passes the token through the job's stop
gate; `_hand_on` gives the consumers the step's tokens once every row is sampled. A job whose
guard or budget reads its parser between two tokens gets its tokens at once instead. Runs on
the engine's worker thread ("prism-llama") only.
"""

from __future__ import annotations

from engine.backends.base import Token
from engine.backends.llama.slots import Active, now, top_logprobs
from engine.backends.llama.vocab import piece


class SampledTokens:
    """See the module docstring. The Batcher sets `_tokens` (token id -> (end of generation?,
    bytes)) and `_outbox` (the step's tokens not handed on yet)."""

    _tokens: dict[int, tuple[bool, bytes]]
    _outbox: list[tuple[Active, Token]]

    def _sampled(self, a: Active, t: float) -> bool:
        """Sample `a`'s token at its row: True when the job goes on (`a.pending` is it)."""
        import llama_cpp as C

        if not a.t_prompt:
            a.t_prompt = t
        g = a.guard
        own = None
        forced = a.budget.next_forced(a.gate.held) if a.budget is not None else None
        if forced is not None:  # the reasoning budget's close: taken as if drawn (budget.py)
            tok = forced
            C.llama_sampler_accept(a.sampler.ptr, tok)
        elif g is not None and g.active:
            tok, own = g.sample(a.sampler, self.ctx, a.row)
        else:
            tok = a.sampler.sample(self.ctx, a.row)
        t_tok = now()
        a.t_first = a.t_first or t_tok
        known = self._tokens.get(tok)
        if known is None:  # asked of llama.cpp once per token id, not once per token drawn
            known = self._tokens[tok] = (
                bool(C.llama_vocab_is_eog(self._vocab_ptr, tok)),
                piece(self._vocab_ptr, tok, tok in self.vocab.preserved))  # vocab.py
        eog, text = known
        if eog:
            self._end(a, "stop")
            return False
        a.n_out += 1
        k = a.job.top_logprobs
        top = top_logprobs(self.ctx, self._vocab_ptr, self.n_vocab, a.row, k) if k > 0 else ()
        guided = None
        if own is not None:
            guided = piece(self._vocab_ptr, own, own in self.vocab.preserved).decode(
                "utf-8", "replace")
        outs = a.gate.push(tok, text, t_tok, top, guided, forced is not None)
        if g is None and a.budget is None:
            self._outbox += [(a, out) for out in outs]  # handed on at the step's end
        else:  # its parser must read the token before the guard or the budget looks
            for out in outs:
                a.job.on_token(out)
        if g is not None:  # the parser has read the token: a call opened, or its grammar ended
            a.output.extend(text)
            g.after(a.output)
        if a.gate.stopped:
            self._end(a, "stop")
        elif a.n_out >= a.limit:
            self._end(a, "length")
        else:
            a.pending = tok
            if a.drafter is not None:
                a.drafter.extend((tok,))
            return True
        return False

    def _close_tokens(self, text: str) -> list[int]:
        """The reasoning close's tokens: special tokens parsed (Qwen3's `</think>` is one),
        no BOS (budget.py)."""
        ids = self.vocab.tokenize(text)
        if ids and self.vocab.add_bos and ids[0] == self.vocab.bos and not (
                self._bos_text and text.startswith(self._bos_text)):
            ids = ids[1:]
        return ids

    def _hand_on(self) -> None:
        """Give the consumers the tokens sampled since the last call, in order: once per step,
        after every row is sampled, so a consumer that wakes on a token (the service's
        hand-off thread) takes the GIL while the next decode runs, not between two samples.
        A consumer that raises ends its job "error"; the others go on."""
        box, self._outbox = self._outbox, []
        for a, out in box:
            if a.finished:  # ended by its own consumer's error, earlier in this box
                continue
            try:
                a.job.on_token(out)
            except Exception as e:
                self._end(a, "error", f"{type(e).__name__}: {e}")
