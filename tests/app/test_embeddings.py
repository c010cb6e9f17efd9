"""POST /v1/embeddings through the official OpenAI SDK against a live `prism serve` with the
default model (SmolLM2-135M): float and base64, list and token-array inputs, usage from the real
tokenizer, the vectors of llama-cpp-python's own `Llama.embed`, the inputs and `dimensions` it
refuses, embeddings while a chat streams, and a second `prism serve --upstream` passing them
through (errors included). A server with no model says it cannot embed."""

from __future__ import annotations

import base64
import math
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator

import httpx
import openai
import pytest

from engine.backends.upstream.engine import UpstreamEngine
from engine.chat.packs import resolve_pack
from tests.support import ROOT, wait_healthy

pytestmark = pytest.mark.model

EMBED_CTX = 96
TEXTS = ["The capital of France is Paris.", "Cats sleep most of the day.",
         "A language model writes one token after another."]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_prism(*args: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PRISM_API_KEY", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port), "--no-record",
         "--log-level", "warning", *args],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=url, timeout=60) as http:
        wait_healthy(http, proc, 180)
    return proc, url


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def local(default_model) -> Iterator[str]:
    proc, url = start_prism("--parallel", "2", "--n-ctx", "1024", "--no-disk-cache",
                            "--embed-ctx", str(EMBED_CTX))
    try:
        yield url
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def front(local) -> Iterator[str]:
    """A second Prism whose engine is the first one (`--upstream`)."""
    proc, url = start_prism("--upstream", local)
    try:
        yield url
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def reference(default_model):
    import llama_cpp

    llm = llama_cpp.Llama(str(default_model), embedding=True, n_ctx=512, verbose=False,
                          pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN)
    yield llm
    llm.close()


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)


def cosine(a, b) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a)) / math.sqrt(sum(y * y for y in b))


def test_float_and_base64_give_the_vectors_of_llama_cpp_pythons_embed(local, reference):
    with client(local) as oa:
        floats = oa.embeddings.create(model="smollm2", input=TEXTS, encoding_format="float")
        raw = oa.with_raw_response.embeddings.create(model="smollm2", input=TEXTS,
                                                     encoding_format="base64")
        default = oa.embeddings.create(model="smollm2", input=TEXTS)  # the SDK asks base64
    assert floats.object == "list" and floats.model == "smollm2"
    assert [d.index for d in floats.data] == [0, 1, 2]
    # base64 on the wire is float32, little-endian: decoded by hand, then by the SDK.
    wire = raw.http_response.json()["data"]
    for text, f, b, d in zip(TEXTS, floats.data, wire, default.data, strict=True):
        assert len(f.embedding) == 576
        unpacked = struct.unpack("<576f", base64.b64decode(b["embedding"]))
        assert max(abs(x - y) for x, y in zip(f.embedding, unpacked, strict=True)) < 1e-7
        assert max(abs(x - y) for x, y in zip(f.embedding, d.embedding, strict=True)) < 1e-7
        assert cosine(f.embedding, reference.embed(text)) > 0.999
    # usage: the real tokenizer's counts, summed over the inputs.
    counted = sum(len(reference.tokenize(t.encode())) for t in TEXTS)
    assert floats.usage.prompt_tokens == floats.usage.total_tokens == counted


def test_token_arrays_embed_as_their_texts(local, reference):
    ids = [reference.tokenize(t.encode()) for t in TEXTS[:2]]
    with client(local) as oa:
        by_ids = oa.embeddings.create(model="m", input=ids, encoding_format="float")
        one = oa.embeddings.create(model="m", input=ids[0], encoding_format="float")
        by_text = oa.embeddings.create(model="m", input=TEXTS[:2], encoding_format="float")
    assert len(by_ids.data) == 2 and len(one.data) == 1  # a flat list is one input
    for a, b in zip(by_ids.data, by_text.data, strict=True):
        assert cosine(a.embedding, b.embedding) > 0.9999
    assert cosine(one.data[0].embedding, by_text.data[0].embedding) > 0.9999
    assert by_ids.usage.prompt_tokens == len(ids[0]) + len(ids[1])


def test_an_input_over_the_context_is_a_400_naming_it(local):
    with client(local) as oa, pytest.raises(openai.BadRequestError) as caught:
        oa.embeddings.create(model="m", input=["short", "word " * (EMBED_CTX + 10)])
    err = caught.value.body
    assert err["code"] == "context_length_exceeded" and err["param"] == "input"
    assert "input[1] has" in err["message"] and f"at most {EMBED_CTX} tokens" in err["message"]


def test_dimensions_other_than_the_models_are_refused(local):
    with client(local) as oa:
        with pytest.raises(openai.BadRequestError) as caught:
            oa.embeddings.create(model="m", input="hi", dimensions=256)
        same = oa.embeddings.create(model="m", input="hi", dimensions=576,
                                    encoding_format="float")
    assert caught.value.body["param"] == "dimensions"
    assert "256" in caught.value.body["message"] and "576" in caught.value.body["message"]
    assert len(same.data[0].embedding) == 576


def test_embeddings_while_a_chat_streams(local):
    """The embedding worker and the engine thread each own their model: neither request fails."""
    chat_text: list[str] = []
    finish: list[str | None] = []
    first_chunk = threading.Event()

    def chat() -> None:
        with client(local) as oa:
            for chunk in oa.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "Count to fifty."}],
                    max_tokens=48, temperature=0, stream=True):
                first_chunk.set()
                for choice in chunk.choices:
                    chat_text.append(choice.delta.content or "")
                    finish.append(choice.finish_reason)

    results: list[int] = []
    lock = threading.Lock()

    def embed(i: int) -> None:
        with client(local) as oa:
            got = oa.embeddings.create(model="m", input=[f"text {i}", TEXTS[i % 3]])
        with lock:
            results.append(len(got.data))

    streaming = threading.Thread(target=chat)
    streaming.start()
    assert first_chunk.wait(120), "the chat never streamed"
    embedders = [threading.Thread(target=embed, args=(i,)) for i in range(4)]
    for t in embedders:
        t.start()
    for t in [*embedders, streaming]:
        t.join(180)
    assert results == [2, 2, 2, 2]
    assert "".join(chat_text).strip() and finish[-1] in ("stop", "length")


def test_upstream_passes_embeddings_through(local, front):
    with client(local) as direct, client(front) as via:
        want = direct.embeddings.create(model="m", input=TEXTS, encoding_format="float")
        got = via.embeddings.create(model="m", input=TEXTS, encoding_format="float")
        b64 = via.embeddings.create(model="m", input=TEXTS)
        with pytest.raises(openai.BadRequestError) as caught:
            via.embeddings.create(model="m", input=["ok", "word " * (EMBED_CTX + 10)])
    for w, g, b in zip(want.data, got.data, b64.data, strict=True):
        assert g.embedding == w.embedding
        assert max(abs(x - y) for x, y in zip(w.embedding, b.embedding, strict=True)) < 1e-7
    assert got.usage.prompt_tokens == want.usage.prompt_tokens
    # The upstream's 400 comes back a 400 in OpenAI's shape, its message kept.
    assert "input[1] has" in caught.value.body["message"]


def test_upstream_that_is_gone_is_a_502(serve_upstream):
    dead = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    live = serve_upstream(UpstreamEngine(dead), resolve_pack("smollm2", require_model=False))
    with pytest.raises(openai.APIStatusError) as caught:
        live.openai().embeddings.create(model="m", input="hi")
    assert caught.value.status_code == 502
    assert caught.value.body["type"] == "upstream_error"
    assert "upstream" in caught.value.body["message"]


def test_a_server_without_a_model_says_it_cannot_embed(serve):
    live = serve("hello")  # a replay: no model to embed with
    with pytest.raises(openai.BadRequestError) as caught:
        live.openai().embeddings.create(model="m", input="hi")
    body = caught.value.body
    assert body["code"] == "embeddings_unsupported" and body["param"] == "model"
    assert "cannot create embeddings" in body["message"]
    assert "replays recorded outputs" in body["message"]
