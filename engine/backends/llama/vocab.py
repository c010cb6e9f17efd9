"""Vocab: a model's tokenizer without its weights, safe to call from any thread.

Owns a vocab-only llama.cpp model (no weights, no context: a few MB) behind its own lock, so
tokenizing never waits for a running generation and never touches the engine thread's
context. The lock only orders callers among themselves (llama.cpp does not promise its vocab
is reentrant). The engine thread uses the same object to render pieces.

Preserved tokens: special tokens render as nothing (end-of-turn markers must not leak into
the output), except exactly those the pack's family lists (`preserved`, llama.cpp's name):
gpt-oss's `<|channel|>` or Kimi's `<|tool_call_begin|>` are special tokens, and the parser
must see them as text (docs/design.md, section "Model families").

Tokenizing is linear in the text (issue 10: one request must not freeze the server). llama.cpp's own
tokenizer splits the text at special tokens by walking a linked list from its head for every
match, so its cost grows with the square of the number of special tokens: 1.9 MB of
`<|im_start|>` froze a server for 43 s. We split the text ourselves with one regex over the
special tokens' texts (longest first), apply their lstrip/rstrip attributes as llama.cpp does,
and hand llama.cpp only the plain pieces between them (with special parsing off). Where two
special tokens overlap (a shorter one starting inside a longer one's match further right),
llama.cpp's order (longest token first, over the whole text) and ours (leftmost match) could
differ; no real chat vocabulary has such pairs, and the tests compare both tokenizers.

`limit`: no token covers more bytes than the vocabulary's longest piece, so a text of B bytes
has at least B / longest tokens. A prompt whose lower bound reaches the limit is refused before
any tokenizing (`PromptTooLong`), and the count is checked again as pieces are tokenized, so a
huge prompt is never tokenized whole just to be refused.
"""

from __future__ import annotations

import ctypes
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_C_SPACE = " \t\n\v\f\r"  # C's isspace(), which llama.cpp strips with


class PromptTooLong(ValueError):
    """The prompt has at least `at_least` tokens, which reaches `limit`."""

    def __init__(self, at_least: int, limit: int) -> None:
        self.at_least, self.limit = at_least, limit
        super().__init__(f"the prompt has at least {at_least} tokens; the context holds {limit}")


def piece(vocab: Any, tok: int, special: bool = False) -> bytes:
    """The bytes of one token (special tokens render as nothing unless `special`). Unlike
    LlamaModel.detokenize, this handles pieces longer than 32 bytes."""
    import llama_cpp

    buf = ctypes.create_string_buffer(64)
    n = llama_cpp.llama_token_to_piece(vocab, tok, buf, 64, 0, special)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = llama_cpp.llama_token_to_piece(vocab, tok, buf, -n, 0, special)
    return buf.raw[:n]


class Vocab:
    """Tokenize / detokenize / piece for one GGUF. Thread-safe; see the module docstring."""

    def __init__(self, path: Path | str, preserved: Sequence[str] = ()) -> None:
        import llama_cpp
        from llama_cpp import _internals

        from engine.backends.llama import log as llama_log

        llama_log.install()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        # Raises ValueError("Failed to load model ...") on a file that is no GGUF. verbose=True:
        # llama-cpp-python must not silence the process's streams (engine/backends/llama/log.py).
        self._model: Any = _internals.LlamaModel(path_model=str(path), params=params,
                                                  verbose=True)
        self._lock = threading.Lock()
        v = self._model.vocab
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(v))
        self.bos = int(llama_cpp.llama_vocab_bos(v))
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(v))
        special_attr = (llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
                        | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN)
        specials: dict[str, tuple[int, int]] = {}  # text -> (id, attr)
        longest = 1
        for tok in range(self.n_vocab):
            attr = int(llama_cpp.llama_vocab_get_attr(v, tok))
            if attr & special_attr:
                text = (llama_cpp.llama_vocab_get_text(v, tok) or b"").decode("utf-8", "replace")
                if text and text not in specials:
                    specials[text] = (tok, attr)
            longest = max(longest, len(piece(v, tok, special=True)))
        self.longest_piece = longest  # bytes
        self._specials = specials
        self._lstrip = {t for t, (_, a) in specials.items()
                        if a & llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP}
        self._rstrip = {t for t, (_, a) in specials.items()
                        if a & llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP}
        # Longest first: at one position the longer special token wins, as in llama.cpp.
        alts = sorted(specials, key=len, reverse=True)
        self._split = re.compile("|".join(map(re.escape, alts))) if alts else None
        # The listed texts that are special tokens here; the others render as text anyway.
        self.preserved_texts = tuple(t for t in preserved if t in specials)
        self.preserved = frozenset(specials[t][0] for t in self.preserved_texts)

    # -- any thread ------------------------------------------------------------------------

    @property
    def special_texts(self) -> tuple[str, ...]:
        return tuple(self._specials)

    def tokenize(self, text: str, limit: int | None = None,
                 plain: Sequence[tuple[int, int]] = ()) -> list[int]:
        """Prompt tokens: special tokens parsed, BOS added once if the model wants one (chat
        templates often write it themselves). With `limit`, raises PromptTooLong as soon as
        the prompt is known to have `limit` tokens or more. A special token that starts inside
        one of the sorted `plain` (start, end) spans is left as text (--escape-special: the
        message content's spans, engine/chat/special.py)."""
        data_len = len(text.encode("utf-8")) if limit is not None else 0
        if limit is not None:
            strip = self._lstrip or self._rstrip
            # lstrip/rstrip specials swallow whitespace without a token: count only the rest.
            counted = data_len - (sum(text.count(c) for c in _C_SPACE) if strip else 0)
            bound = -(-counted // self.longest_piece)
            if bound >= limit:
                raise PromptTooLong(bound, limit)
        with self._lock:
            vocab = self._open().vocab
            ids: list[int] = []
            for kind, part in self._parts(text, plain):
                if kind == "special":
                    ids.append(part)
                else:
                    ids += _tokenize_plain(vocab, part)
                if limit is not None and len(ids) >= limit:
                    raise PromptTooLong(len(ids), limit)
        if self.add_bos and self.bos >= 0 and (not ids or ids[0] != self.bos):
            ids.insert(0, self.bos)
            if limit is not None and len(ids) >= limit:
                raise PromptTooLong(len(ids), limit)
        return ids

    def tokenize_llama(self, text: str) -> list[int]:
        """llama.cpp's own tokenizer on the whole text (quadratic in special tokens): the
        reference the tests compare `tokenize` with."""
        with self._lock:
            ids = self._open().tokenize(text.encode("utf-8"), add_bos=False, special=True)
        if self.add_bos and self.bos >= 0 and (not ids or ids[0] != self.bos):
            ids.insert(0, self.bos)
        return ids

    def detokenize(self, ids: Sequence[int]) -> str:
        with self._lock:
            vocab = self._open().vocab
            data = b"".join(piece(vocab, int(i), int(i) in self.preserved) for i in ids)
        return data.decode("utf-8", "replace")

    def markup_text(self, ids: Sequence[int]) -> str:
        """The text of `ids` with every special token written out (`<|im_start|>`), as a
        prompt shows them: for a diff of two prompts, not for output."""
        with self._lock:
            vocab = self._open().vocab
            data = b"".join(piece(vocab, int(i), True) for i in ids)
        return data.decode("utf-8", "replace")

    def piece(self, tok: int) -> bytes:
        with self._lock:
            return piece(self._open().vocab, tok, tok in self.preserved)

    def close(self) -> None:
        with self._lock:
            if self._model is not None:
                self._model.close()
                self._model = None  # llama.cpp would read freed memory; fail in Python instead

    # -- internals -------------------------------------------------------------------------

    def _open(self) -> Any:
        if self._model is None:
            raise RuntimeError("engine is closed")
        return self._model

    def _parts(self, text: str, plain: Sequence[tuple[int, int]] = ()):
        """("text", str) and ("special", id) pieces, in order; empty texts skipped."""
        if self._split is None:
            if text:
                yield "text", text
            return
        pos = 0
        strip_left = False
        j = 0
        for m in self._split.finditer(text):
            while j < len(plain) and plain[j][1] <= m.start():
                j += 1
            if j < len(plain) and plain[j][0] <= m.start():
                continue  # inside message content that is to stay text
            special = m.group()
            left = text[pos:m.start()]
            if strip_left:
                left = left.lstrip(_C_SPACE)
            if special in self._lstrip:
                left = left.rstrip(_C_SPACE)
            if left:
                yield "text", left
            yield "special", self._specials[special][0]
            strip_left = special in self._rstrip
            pos = m.end()
        tail = text[pos:]
        if strip_left:
            tail = tail.lstrip(_C_SPACE)
        if tail:
            yield "text", tail


def _tokenize_plain(vocab: Any, text: str) -> list[int]:
    """One piece without special tokens in it: llama.cpp's tokenizer, special parsing off."""
    import llama_cpp

    data = text.encode("utf-8")
    # A token covers at least one byte (an SPM space prefix adds one): len + 2 suffices.
    cap = len(data) + 2
    buf = (llama_cpp.llama_token * cap)()
    n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, cap, False, False)
    if n < 0:  # cannot happen with the cap above; ask llama.cpp for the size it wants
        buf = (llama_cpp.llama_token * -n)()
        n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, -n, False, False)
    return buf[:n]
