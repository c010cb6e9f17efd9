"""The call guard: once the parser says a real call has opened, the rest of it follows a grammar.

Owns `CallGuard`, one per guarded job (issue 22; README, "Guarded calls"). Prism's own parser
decides when a call has opened (its family's rules: a line start, outside code, the opener
followed by the call's body; inside reasoning too, where it is an implicit end), the service
hands the job a `Guard` (engine/backends/base.py) whose `opened()` says so, and from the next
token on this sequence samples under a grammar for one call in the family's own syntax
(engine/grammar/tools.py, `forced_call(..., several=False)`: the declared tools' names, then
arguments that satisfy the chosen tool's schema) until the grammar is complete, then freely
again: the model may write text, another call (guarded in turn) or end its turn. Runs only on
the engine's worker thread ("prism-llama"), inside `Batcher._sampled`; the grammar sampler is
this job's alone, so no other sequence in the batch is touched.

How a token is drawn while guarded (llama.cpp's common sampler does the same, "grammar
last"): the job's own chain draws from the raw logits; if the grammar accepts that token it is
taken (the model wrote it); if not, the logits are masked by the grammar and the chain draws
again, and the token is `guided` (the model's own draw, the token taken): a `guided_token`
event, so a developer tells "the model wrote this" from "the guard made it write this". A
grammar never accepts a token it has not first been asked about (llama.cpp aborts the process
on a token its grammar rejects).

Catching up: the grammar starts at the call's opener, but the model has already written the
opener and maybe part of the body when the parser decides; that text (from the generated
output, held-back stop-string text included) is tokenized and fed to the grammar, each token
checked first. Text the grammar cannot follow (an opener written with other whitespace than the
family's writer uses) leaves that call unguarded, logged: the parser still reads it.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Any

import numpy as np

from engine.backends.base import Guard

log = logging.getLogger("prism")

LOOK_BACK = 64  # characters before the parser's call start where the grammar's may lie
_TOKEN = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])  # llama_token_data


class CallGuard:
    """One job's guard: the grammar text, the grammar sampler while a call is guarded."""

    def __init__(self, guard: Guard, vocab: Any, n_vocab: int, eog: int) -> None:
        self.guard = guard
        self._vocab = vocab
        self._n_vocab = n_vocab
        self._eog = eog
        self._g = None  # the grammar sampler while a call is guarded
        self._done_upto = -1  # the opener offset of the last call guarded (or given up)
        self._arr = np.zeros(n_vocab, dtype=_TOKEN)
        self._one = np.zeros(1, dtype=_TOKEN)
        self.calls = 0  # calls guarded
        self.guided = 0  # tokens the grammar changed

    @property
    def active(self) -> bool:
        return self._g is not None

    # -- the grammar -------------------------------------------------------------------------

    def _allows(self, tok: int) -> bool:
        """Does the grammar accept `tok` next? (Asked before every accept: see module doc.)"""
        import llama_cpp as C

        one = self._one
        one[0] = (tok, 0.0, 0.0)
        data = C.llama_token_data_array(
            data=one.ctypes.data_as(C.llama_token_data_p), size=1, selected=-1, sorted=False)
        C.llama_sampler_apply(self._g, ctypes.byref(data))
        return bool(np.isfinite(one[0]["logit"]))

    def _start(self, text: str, quiet: bool = False) -> bool:
        """Open the grammar and feed it `text`, the call written so far; False (grammar
        dropped, logged unless `quiet`) when the grammar cannot follow it."""
        import llama_cpp as C

        g = C.llama_sampler_init_grammar(self._vocab, self.guard.grammar.encode("utf-8"),
                                         b"root")
        if not g:
            log.warning("[prism] guard: llama.cpp could not parse the call grammar; unguarded")
            self.guard = None  # type: ignore[assignment]  # never again for this job
            return False
        self._g = g
        for tok in self._tokenize(text):
            if not self._allows(tok):
                if not quiet:
                    log.info("[prism] guard: the call's opening %r does not fit the family's "
                             "grammar; this call is not guarded", text[:60])
                self._stop()
                return False
            C.llama_sampler_accept(g, tok)
        self.calls += 1
        return True

    def _tokenize(self, text: str) -> list[int]:
        import llama_cpp as C

        raw = text.encode("utf-8")
        cap = len(raw) + 8
        buf = (C.llama_token * cap)()
        n = C.llama_tokenize(self._vocab, raw, len(raw), buf, cap, False, True)
        return list(buf[:n]) if n >= 0 else []

    def _stop(self) -> None:
        import llama_cpp as C

        if self._g is not None:
            C.llama_sampler_free(self._g)
            self._g = None

    def close(self) -> None:
        self._stop()

    # -- per token ---------------------------------------------------------------------------

    def sample(self, sampler: Any, ctx: Any, row: int) -> tuple[int, int | None]:
        """Draw under the grammar: (token taken, the model's own draw when the grammar
        refused it, else None). The job's chain and the grammar both accept the token."""
        import llama_cpp as C

        logits = np.ctypeslib.as_array(C.llama_get_logits_ith(ctx, row), shape=(self._n_vocab,))
        own = self._draw(sampler.ptr, logits, mask=False)
        if self._allows(own):
            taken, model = own, None
        else:
            taken, model = self._draw(sampler.ptr, logits, mask=True), own
            if not self._allows(taken):  # the grammar allows nothing: give the call up
                log.warning("[prism] guard: the grammar allows no token here; unguarded")
                self._stop()
                C.llama_sampler_accept(sampler.ptr, own)
                return own, None
            self.guided += 1
        C.llama_sampler_accept(sampler.ptr, taken)
        C.llama_sampler_accept(self._g, taken)
        return taken, model

    def _draw(self, chain: Any, logits: np.ndarray, mask: bool) -> int:
        import llama_cpp as C

        arr = self._arr
        arr["id"] = np.arange(self._n_vocab, dtype=np.int32)
        arr["logit"] = logits
        arr["p"] = 0.0
        data = C.llama_token_data_array(
            data=arr.ctypes.data_as(C.llama_token_data_p), size=self._n_vocab, selected=-1,
            sorted=False)
        if mask:
            C.llama_sampler_apply(self._g, ctypes.byref(data))
        C.llama_sampler_apply(chain, ctypes.byref(data))
        return int(arr[data.selected]["id"])

    def after(self, output: bytes | bytearray) -> None:
        """After a token was delivered: end a complete call's grammar; start one when the
        parser has just opened a call. `output`: everything the job generated so far."""
        if self.guard is None:
            return
        if self._g is not None:
            if self._allows(self._eog):  # the one call is complete: free sampling again
                self._stop()
            return
        at = self.guard.opened()
        if at is None or at <= self._done_upto:
            return
        self._done_upto = at
        text = output.decode("utf-8", "replace")
        # Where the family's grammar starts is not always where the parser's call starts: a
        # frame the parser consumed as markup before it (GigaChat's role header, Harmony-like
        # channels), a space the writer puts before the opener (FireFunction's " functools").
        # The nearest start at or before the parser's whose text the grammar follows wins.
        for k in range(at, max(at - LOOK_BACK, 0) - 1, -1):
            if self._start(text[k:], quiet=k > max(at - LOOK_BACK, 0)):
                return
