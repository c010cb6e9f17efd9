"""The Prompt view's context source: the tokenizer, the render and the previous request.

Owns `context_source`, which gives the window's prompt view (widgets/prompt_view.py) what it
needs to count a prompt's parts and diff two prompts: the pack's model's tokenizer (a vocab-only
llama.cpp model, a few MB, safe from any thread; the default model's when the pack ships none,
as with a replayed recording's pack), the service's render (to locate each tool's schema), and
the request shown before a given one in the same source (a released one read back from its
recording). Built once on the GUI thread; its functions run there.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from engine.backends.llama.vocab import Vocab
from engine.chat.packs import DEFAULT_PACK, PackError, resolve_pack
from engine.service import Service
from inspector.recall import recorded
from inspector.tracks import Track, TrackStore
from widgets.prompt_view import ContextSource


def _previous(store: TrackStore):
    def previous(track: Track) -> Track | None:
        before = None
        for t in store:  # oldest first
            if t is track:
                break
            if t.origin == track.origin:
                before = t
        if before is not None and not before.prompt and before.home is not None:
            rec = recorded(before.home)  # released: its prompt from the recording
            if rec is not None:
                return Track(id=before.id, prompt=rec.prompt, request=rec.request)
        return before
    return previous


@contextmanager
def context_source(service: Service, store: TrackStore) -> Iterator[ContextSource | None]:
    """The source for the window's lifetime (None when no tokenizer can be had); its vocab is
    closed on exit."""
    try:
        gguf = service.pack.gguf or resolve_pack(DEFAULT_PACK).gguf
        vocab = Vocab(gguf)
    except (PackError, OSError, ValueError, RuntimeError):
        yield None
        return
    try:
        yield ContextSource(vocab.tokenize, gguf.name, service.render, _previous(store),
                            vocab.markup_text)
    finally:
        vocab.close()
