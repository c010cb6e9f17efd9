"""app/prompt_context.py: the window's prompt view gets the default model's tokenizer when the
pack ships no model (a replay), the service's render, and the previous request of the same
source."""

from __future__ import annotations

from engine.chat.request import ChatRequest, Message
from inspector.tracks import Track, TrackStore


def test_context_source_for_a_replay_service(replay_service, default_model):
    from app.prompt_context import context_source
    from engine.backends.llama.vocab import Vocab

    service = replay_service("hello")  # the qwen3-xml pack: a template, no model
    store = TrackStore()
    a, other, b = (Track(id="1", origin="live", prompt="x"), Track(id="2", origin="f.jsonl"),
                   Track(id="3", origin="live", prompt="y"))
    for t in (a, other, b):
        store.add(t)
    with context_source(service, store) as source:
        assert source is not None and source.name == default_model.name
        vocab = Vocab(default_model)
        try:
            assert source.tokenize("Hello there") == vocab.tokenize("Hello there")
        finally:
            vocab.close()
        assert source.previous(b) is a and source.previous(a) is None
        req = ChatRequest(messages=(Message("user", "Hi"),))
        assert source.render(req) == service.render(req)
        assert "<|im_start|>" in source.detokenize(source.tokenize("<|im_start|>user"))
