"""The Embedder on the default model (SmolLM2-135M): its vectors against llama-cpp-python's own
`Llama.embed` on the same GGUF, several inputs pooled in one decode, token arrays, the inputs it
refuses (by index), the worker thread that owns the model, and a model that cannot embed."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

from engine.backends.llama.embed import (
    Embedder,
    EmbedUnavailable,
    InputInvalid,
    InputTooLong,
)

pytestmark = pytest.mark.model

TEXTS = ["Hello world", "The cat sat on the mat.",
         "Embeddings are vectors that stand for a text, so that similar texts lie close. " * 4,
         "Prism parses what a local model writes."]
LIMIT = 128


def cosine(a, b) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a)) / math.sqrt(sum(y * y for y in b))


@pytest.fixture(scope="module")
def reference(default_model):
    """llama-cpp-python's own embedding model: mean pooling, as llama-server's --pooling mean."""
    import llama_cpp

    llm = llama_cpp.Llama(str(default_model), embedding=True, n_ctx=512, verbose=False,
                          pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN)
    yield llm
    llm.close()


@pytest.fixture(scope="module")
def embedder(default_model):
    e = Embedder(default_model, n_ctx=LIMIT)
    yield e
    e.close()


def decodes(embedder: Embedder, monkeypatch) -> list[int]:
    """The number of inputs in each decode the worker runs from now on."""
    seen: list[int] = []
    real = embedder._decode

    def counted(items):
        seen.append(len(items))
        real(items)

    monkeypatch.setattr(embedder, "_decode", counted)
    return seen


def test_vectors_equal_llama_cpp_pythons_own_embed(embedder, reference):
    got = embedder.submit(TEXTS).result(120)
    assert len(got.vectors) == len(TEXTS)
    for text, vec in zip(TEXTS, got.vectors, strict=True):
        assert len(vec) == 576 == embedder.dimensions
        assert cosine(vec, reference.embed(text)) > 0.999
        assert math.isclose(math.fsum(x * x for x in vec), 1.0, rel_tol=1e-9)  # unit length
    # The usage count is the real tokenizer's (special tokens added as the model wants).
    assert got.n_tokens == sum(len(reference.tokenize(t.encode())) for t in TEXTS)
    # Different texts point different ways: the vectors are not one constant.
    assert cosine(got.vectors[0], got.vectors[1]) < 0.99


def test_inputs_share_one_decode_and_give_what_they_give_alone(embedder, monkeypatch):
    seen = decodes(embedder, monkeypatch)
    together = embedder.submit(TEXTS).result(120).vectors
    assert seen == [len(TEXTS)]  # one decode, every input its own pooled sequence
    alone = [embedder.submit([t]).result(120).vectors[0] for t in TEXTS]
    for a, b in zip(together, alone, strict=True):
        assert cosine(a, b) > 0.9999


def test_a_decode_holds_at_most_the_context(default_model, monkeypatch):
    small = Embedder(default_model, n_ctx=40, n_seq_max=3)
    try:
        seen = decodes(small, monkeypatch)
        texts = ["one two three four five six seven eight nine ten"] * 7  # 10 tokens each
        got = small.submit(texts).result(120)
        assert seen == [3, 3, 1]  # three sequences a decode, then what is left
        assert len(got.vectors) == 7
        assert all(cosine(v, got.vectors[0]) > 0.9999 for v in got.vectors)  # one text
    finally:
        small.close()


def test_a_token_array_is_embedded_as_its_text(embedder, reference):
    ids = reference.tokenize(TEXTS[1].encode())
    got = embedder.submit([ids, TEXTS[1]]).result(120)
    assert cosine(got.vectors[0], got.vectors[1]) > 0.9999
    assert got.n_tokens == 2 * len(ids)


def test_an_input_over_the_context_is_refused_by_index(embedder):
    long = "word " * (LIMIT + 20)
    with pytest.raises(InputTooLong) as caught:
        embedder.submit(["short", long]).result(120)
    err = caught.value
    assert (err.index, err.limit) == (1, LIMIT) and err.n_tokens > LIMIT
    assert f"input[1] has {err.n_tokens} tokens" in str(err) and str(LIMIT) in str(err)
    # The worker goes on: the next request is answered.
    assert len(embedder.submit(["short"]).result(120).vectors) == 1


@pytest.mark.parametrize(("inputs", "index", "words"), [
    (["fine", ""], 1, "is empty"),
    ([[1, 2], [5, 49152]], 1, "49152"),
    ([[-1]], 0, "-1"),
    ([[]], 0, "no tokens"),
])
def test_inputs_it_cannot_embed_are_named(embedder, inputs, index, words):
    with pytest.raises(InputInvalid) as caught:
        embedder.submit(inputs).result(120)
    assert caught.value.index == index and words in str(caught.value)


def test_the_worker_thread_alone_loads_uses_and_frees_the_model(default_model):
    e = Embedder(default_model, n_ctx=64)
    names = lambda: {t.name for t in threading.enumerate()}  # noqa: E731
    before = sum(1 for t in threading.enumerate() if t.name == "prism-embed")
    assert not e.loaded and e.dimensions == 576  # known from the file, nothing loaded
    loaded_on: list[str] = []
    real = e._load

    def load():
        loaded_on.append(threading.current_thread().name)
        real()

    e._load = load
    e.submit(["hi"]).result(120)
    assert loaded_on == ["prism-embed"] and e.loaded and "prism-embed" in names()
    e.close()
    assert not e.loaded
    assert sum(1 for t in threading.enumerate() if t.name == "prism-embed") == before
    with pytest.raises(EmbedUnavailable, match="closed"):
        e.submit(["hi"])


def test_a_model_that_cannot_load_says_so_once(default_model, tmp_path: Path):
    cut = tmp_path / "cut.gguf"  # the header and metadata, none of the weights
    with default_model.open("rb") as f:
        cut.write_bytes(f.read(4 << 20))
    e = Embedder(cut, n_ctx=64)
    try:
        with pytest.raises(EmbedUnavailable, match="this model cannot embed"):
            e.submit(["hi"]).result(120)
        with pytest.raises(EmbedUnavailable, match="this model cannot embed"):
            e.submit(["hi"])  # refused at once: the failure is remembered
    finally:
        e.close()


def test_a_file_that_is_no_gguf_is_refused_at_once(tmp_path: Path):
    bad = tmp_path / "notes.gguf"
    bad.write_text("not a model")
    with pytest.raises(EmbedUnavailable, match="cannot read the model"):
        Embedder(bad)
