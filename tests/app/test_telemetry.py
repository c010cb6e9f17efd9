"""app/telemetry.py: `prism serve --otlp-endpoint` exports one span per request, in the GenAI
semantic conventions plus Prism's own attributes, to a real OTLP/HTTP receiver on 127.0.0.1
(http.server decoding the protobuf `ExportTraceServiceRequest` with opentelemetry-proto); the
standard OTEL_* variables hold; a caller's `traceparent` is joined; content goes out only with
`--otlp-content`; and a collector that is down, or accepts and never answers, fails or holds no
request. Every server is a real `prism serve` process (a replay, and the default model once)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.support import wait_healthy, wait_until

ROOT = Path(__file__).resolve().parents[2]
# A reply whose content holds a second </think>: the parser's `stray_think_end` anomaly.
STRAY = "Let me think.\n</think>\n\nThe answer is 4.</think> Done."
TRACE_ID, PARENT_ID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


def _value(v):
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, which) if which else None


def _attrs(kvs) -> dict:
    return {kv.key: _value(kv.value) for kv in kvs}


class Collector:
    """An OTLP/HTTP traces receiver: every span it is sent, decoded, with its resource's
    attributes, and the headers and path of each export."""

    def __init__(self) -> None:
        self.spans: list[dict] = []
        self.exports: list[tuple[str, dict]] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                req = ExportTraceServiceRequest.FromString(body)
                collector.exports.append((self.path, dict(self.headers)))
                for rs in req.resource_spans:
                    resource = _attrs(rs.resource.attributes)
                    for ss in rs.scope_spans:
                        collector.spans += [{"span": s, "attrs": _attrs(s.attributes),
                                             "resource": resource} for s in ss.spans]
                out = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, n: int) -> list[dict]:
        wait_until(lambda: len(self.spans) >= n, 30, what=f"{n} spans at the collector")
        return self.spans

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Stalled:
    """A collector that accepts every connection and never reads or answers."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def collector():
    c = Collector()
    yield c
    c.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prism:
    """`prism serve` as a process, with `env` over the test's own (no OTEL_* of the caller's)."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, boot: float = 60) -> None:
        self.port = _free_port()
        base = {k: v for k, v in os.environ.items()
                if not k.startswith("OTEL_") and k != "PRISM_API_KEY"}
        # Batches go out every 50 ms, not 5 s, so a test waits little for its spans.
        base |= {"PYTHONUNBUFFERED": "1", "OTEL_BSP_SCHEDULE_DELAY": "50", **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--port", str(self.port), "--no-record",
             "--log-level", "warning", *args],
            cwd=ROOT, env=base, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=60)
        wait_healthy(self.http, self.proc, boot)

    def chat(self, text: str = "What is 2+2?", headers: dict | None = None, **body) -> dict:
        r = self.http.post("/v1/chat/completions", headers=headers, json={
            "model": "m", "messages": [{"role": "user", "content": text}], **body})
        assert r.status_code == 200, r.text
        return r.json()

    def stop(self) -> str:
        self.http.close()
        self.proc.send_signal(signal.SIGINT)
        out, _ = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, out
        return out


def _replay(tmp_path: Path, text: str = STRAY) -> str:
    out = tmp_path / "out.txt"
    out.write_text(text, encoding="utf-8")
    return str(out)


def test_a_span_per_request_with_genai_and_prism_attributes(tmp_path, collector):
    prism = Prism("--replay", _replay(tmp_path), "--otlp-endpoint", collector.url)
    try:
        reply = prism.chat(max_tokens=100, temperature=0.3, top_p=0.9)
        joined = prism.chat(headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
        spans = collector.wait(2)
    finally:
        out = prism.stop()
    assert f"exporting traces to {collector.url}/v1/traces" in out
    assert [path for path, _ in collector.exports][:1] == ["/v1/traces"]
    by_id = {s["attrs"]["gen_ai.response.id"]: s for s in spans}
    first, second = by_id[reply["id"]], by_id[joined["id"]]
    a, span = first["attrs"], first["span"]
    assert span.name == "chat m" and span.kind == Span.SPAN_KIND_SERVER
    assert first["resource"]["service.name"] == "prism"
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.provider.name"] == "prism"
    assert a["gen_ai.request.model"] == "m"
    assert a["gen_ai.request.max_tokens"] == 100
    assert a["gen_ai.request.temperature"] == pytest.approx(0.3)
    assert a["gen_ai.request.top_p"] == pytest.approx(0.9)
    usage = reply["usage"]
    assert a["gen_ai.usage.input_tokens"] == usage["prompt_tokens"] > 0
    assert a["gen_ai.usage.output_tokens"] == usage["completion_tokens"] > 0
    assert a["gen_ai.response.finish_reasons"] == [reply["choices"][0]["finish_reason"]]
    assert a["prism.family"] == "qwen-xml" and a["prism.api"] == "openai"
    assert a["prism.verdict"] == "answered"
    assert a["prism.anomalies.stray_think_end"] == 1 and a["prism.anomalies"] == 1
    assert a["prism.prompt_tokens.computed"] + a["prism.prompt_tokens.slot"] + \
        a["prism.prompt_tokens.disk"] == usage["prompt_tokens"]
    assert a["prism.guided_tokens"] == 0
    events = [(e.name, _attrs(e.attributes)) for e in span.events]
    assert [(name, ev["prism.anomaly.kind"]) for name, ev in events] == \
        [("prism.anomaly", "stray_think_end")]
    # Without --otlp-content: no message text anywhere.
    assert not {"gen_ai.input.messages", "gen_ai.output.messages"} & set(a)
    assert "prism.anomaly.text" not in events[0][1]
    assert "2+2" not in repr(span) and "answer is 4" not in repr(span)
    # The caller's trace: joined with its traceparent, a trace of its own without.
    assert second["span"].trace_id.hex() == TRACE_ID
    assert second["span"].parent_span_id.hex() == PARENT_ID
    assert span.trace_id.hex() != TRACE_ID and not span.parent_span_id


def test_content_only_with_otlp_content(tmp_path, collector):
    prism = Prism("--replay", _replay(tmp_path), "--otlp-endpoint", collector.url,
                  "--otlp-content")
    try:
        reply = prism.chat("What is 2+2?")
        [span] = collector.wait(1)
    finally:
        prism.stop()
    a = span["attrs"]
    assert json.loads(a["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "What is 2+2?"}]}]
    [out] = json.loads(a["gen_ai.output.messages"])
    message = reply["choices"][0]["message"]
    assert out["role"] == "assistant" and out["finish_reason"] == "stop"
    assert {"type": "text", "content": message["content"]} in out["parts"]
    assert {"type": "reasoning", "content": "Let me think."} in out["parts"]
    [event] = span["span"].events
    assert _attrs(event.attributes)["prism.anomaly.text"] == "</think>"


def test_the_standard_variables(tmp_path, collector):
    # OTEL_EXPORTER_OTLP_ENDPOINT alone turns the export on (at its /v1/traces); the headers
    # and the service name come from theirs.
    prism = Prism("--replay", _replay(tmp_path), env={
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_EXPORTER_OTLP_HEADERS": "x-team=inference,authorization=Bearer%20k",
        "OTEL_SERVICE_NAME": "my-llm"})
    try:
        prism.chat()
        [span] = collector.wait(1)
    finally:
        prism.stop()
    path, headers = collector.exports[0]
    assert path == "/v1/traces"
    lower = {k.lower(): v for k, v in headers.items()}
    assert lower["x-team"] == "inference" and lower["authorization"] == "Bearer k"
    assert span["resource"]["service.name"] == "my-llm"


def test_the_flag_overrides_the_variables(tmp_path, collector):
    nowhere = f"http://127.0.0.1:{_free_port()}"
    prism = Prism("--replay", _replay(tmp_path), "--otlp-endpoint",
                  f"{collector.url}/v1/traces",
                  env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{nowhere}/v1/traces"})
    try:
        reply = prism.chat()
        [span] = collector.wait(1)
    finally:
        prism.stop()
    assert span["attrs"]["gen_ai.response.id"] == reply["id"]


def test_no_export_without_an_endpoint(tmp_path, collector):
    prism = Prism("--replay", _replay(tmp_path))
    try:
        prism.chat()
    finally:
        out = prism.stop()
    assert "exporting traces" not in out and collector.exports == []


def _many(prism: Prism, n: int = 6) -> None:
    """n requests, streamed and not, all answered in full while the collector misbehaves."""
    for i in range(n):
        if i % 2:
            with prism.http.stream("POST", "/v1/chat/completions", json={
                    "model": "m", "stream": True,
                    "messages": [{"role": "user", "content": "hi"}]}) as r:
                assert r.status_code == 200
                body = "".join(r.iter_text())
            assert '"finish_reason":"stop"' in body and body.rstrip().endswith("data: [DONE]")
        else:
            assert "answer is 4" in prism.chat()["choices"][0]["message"]["content"]
    assert prism.http.get("/health").json() == {"status": "ok"}


def test_a_collector_that_is_down_fails_no_request(tmp_path):
    nowhere = f"http://127.0.0.1:{_free_port()}"  # nothing listens: connection refused
    prism = Prism("--replay", _replay(tmp_path), "--otlp-endpoint", nowhere)
    try:
        _many(prism)
    finally:
        prism.stop()  # and the process stops, status 0


def test_a_collector_that_never_answers_holds_no_request(tmp_path):
    stalled = Stalled()
    # Each export waits 10 minutes for its answer: a request that waited on one would run
    # into the client's 60 s timeout.
    prism = Prism("--replay", _replay(tmp_path), "--otlp-endpoint", stalled.url,
                  env={"OTEL_EXPORTER_OTLP_TIMEOUT": "600"})
    try:
        _many(prism)
        wait_until(lambda: stalled.held, 30, what="the exporter to connect")
        _many(prism)  # with an export stuck in the collector
    finally:
        out = prism.stop()  # the stop gives up on the last spans and exits 0
        stalled.close()
    assert "did not take the last spans" in out


@pytest.mark.model
def test_the_default_model_span_matches_its_usage(default_model, collector):
    prism = Prism("--max-tokens", "8", "--no-disk-cache", "--otlp-endpoint", collector.url,
                  boot=120)
    try:
        first = prism.chat("Name a colour.")
        again = prism.chat("Name a colour.")
        spans = collector.wait(2)
    finally:
        prism.stop()
    by_id = {s["attrs"]["gen_ai.response.id"]: s["attrs"] for s in spans}
    for reply in (first, again):
        a = by_id[reply["id"]]
        assert a["gen_ai.usage.input_tokens"] == reply["usage"]["prompt_tokens"]
        assert a["gen_ai.usage.output_tokens"] == reply["usage"]["completion_tokens"] <= 8
        assert a["gen_ai.response.finish_reasons"] == [reply["choices"][0]["finish_reason"]]
        assert a["gen_ai.response.model"] == "SmolLM2-135M-Instruct.Q4_1"
        assert a["prism.family"] == "hermes-json" and a["prism.pack"] == "smollm2"
        assert a["prism.prompt_tokens.computed"] + a["prism.prompt_tokens.slot"] + \
            a["prism.prompt_tokens.disk"] == a["gen_ai.usage.input_tokens"]
        assert a["gen_ai.response.time_to_first_chunk"] > 0
    # The same prompt again: read from a slot's cache, not computed again.
    a = by_id[again["id"]]
    assert a["prism.prompt_tokens.slot"] == \
        again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


@pytest.mark.model
def test_a_catalog_traces_every_model_it_loads(default_model, tmp_path, collector):
    # Two models of one catalog (the same GGUF under two ids, so no second download): each
    # request's span names the model it asked for, before and after the first is unloaded
    # and loaded again, and the caller's traceparent is joined in catalog mode too.
    models = tmp_path / "models"
    models.mkdir()
    for name in ("alpha", "beta"):
        (models / f"{name}.gguf").symlink_to(default_model)
    prism = Prism("--models-dir", str(models), "--max-tokens", "4", "--no-disk-cache",
                  "--otlp-endpoint", collector.url, boot=120)
    try:
        def chat(model: str, headers: dict | None = None) -> dict:
            r = prism.http.post("/v1/chat/completions", headers=headers, json={
                "model": model, "messages": [{"role": "user", "content": "Hi"}]})
            assert r.status_code == 200, r.text
            return r.json()

        a1 = chat("alpha")
        b1 = chat("beta", headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
        r = prism.http.post("/models/unload", json={"model": "alpha"})
        assert r.status_code == 200, r.text
        wait_until(lambda: {m["id"]: m["status"]["value"] for m in
                            prism.http.get("/v1/models").json()["data"]}["alpha"] == "unloaded",
                   60)
        a2 = chat("alpha")  # loaded again: traced again
        spans = collector.wait(3)
    finally:
        out = prism.stop()
    assert out.count("exporting traces to") == 1  # one export for the catalog
    by_id = {s["attrs"]["gen_ai.response.id"]: s for s in spans}
    for reply, model in ((a1, "alpha"), (b1, "beta"), (a2, "alpha")):
        a = by_id[reply["id"]]["attrs"]
        assert a["gen_ai.request.model"] == model
        assert a["gen_ai.usage.output_tokens"] == reply["usage"]["completion_tokens"]
        assert a["prism.model.file"] == f"{model}.gguf"
    assert by_id[b1["id"]]["span"].trace_id.hex() == TRACE_ID
    assert {s["resource"]["service.name"] for s in spans} == {"prism"}
