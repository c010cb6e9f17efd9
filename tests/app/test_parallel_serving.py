"""The server over LlamaEngine(parallel=4) on the real default model: 16 SDK clients at once.

Cross-module on purpose (app/api over engine/backends/llama/batch.py): four requests decode
together, twelve wait FIFO, and every one of the sixteen replies must come back complete and
well-formed, streamed or not, with the slots and their use visible in /metrics.
"""

from __future__ import annotations

import re
import threading

import pytest

from app.api.server import ServerThread
from app.api.state import AppState, ServerConfig
from engine.chat.packs import resolve_pack
from engine.metrics import Metrics
from engine.service import Service

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def live(default_model):
    from engine.backends.llama.engine import LlamaEngine

    pack = resolve_pack("smollm2")
    # Split caches: the layout `prism serve` picks where four fit the memory budget (the
    # unified pool is covered by tests/engine/backends/llama/test_batch.py).
    engine = LlamaEngine(pack.gguf, n_ctx=2048, parallel=4, n_threads=1, kv_unified=False)
    service = Service(engine, pack, metrics=Metrics(engine))
    server = ServerThread(AppState(service=service, config=ServerConfig())).start()
    yield server, service
    engine.close()
    server.stop()


def test_sixteen_concurrent_sdk_clients_all_complete(live) -> None:
    import openai

    server, service = live
    results: dict[int, tuple] = {}
    errors: list[BaseException] = []
    busy_seen: list[int] = []

    def client(i: int) -> None:
        oa = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=300)
        try:
            ask = [{"role": "user", "content": f"Tell me fact number {i} about the sea."}]
            max_tokens = 4 + i % 5
            if i % 2:
                text, finish, usage = "", None, None
                for chunk in oa.chat.completions.create(
                        model="smollm2", messages=ask, max_tokens=max_tokens, seed=i,
                        stream=True, stream_options={"include_usage": True}):
                    busy_seen.append(service.engine.busy_slots())
                    if chunk.usage:
                        usage = chunk.usage
                    for choice in chunk.choices:
                        text += choice.delta.content or ""
                        finish = choice.finish_reason or finish
                results[i] = (text, finish, usage.completion_tokens, max_tokens)
            else:
                r = oa.chat.completions.create(model="smollm2", messages=ask, seed=i,
                                               max_tokens=max_tokens)
                results[i] = (r.choices[0].message.content, r.choices[0].finish_reason,
                              r.usage.completion_tokens, max_tokens)
        except BaseException as e:  # reported below, with the client's number
            errors.append(e)
        finally:
            oa.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not errors, errors
    assert sorted(results) == list(range(16))
    for i, (text, finish, n, max_tokens) in results.items():
        assert finish in ("stop", "length"), (i, finish)
        assert 1 <= n <= max_tokens, (i, n)
        assert text and text.strip(), i
        assert finish == "stop" or n == max_tokens, (i, finish, n)
    assert max(busy_seen) >= 2  # requests were decoded side by side
    snap = service.metrics.snapshot()
    assert snap["live"]["slots_total"] == 4
    slots = [r["slot"] for r in snap["requests"][:16]]
    assert set(slots) <= {0, 1, 2, 3} and len(set(slots)) >= 2
    import httpx

    body = httpx.get(server.url + "/metrics").text
    assert re.search(r'^prism_slots_total\{model="[^"]*"\} 4\.0$', body, re.M), body[:2000]
    assert re.search(r"^prism_slots_busy\{", body, re.M)
    # llama-server's /props says how many requests run at once: --parallel.
    assert httpx.get(server.url + "/props").json()["total_slots"] == 4
