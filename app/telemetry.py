"""OpenTelemetry traces: one span per request, in the GenAI semantic conventions, over OTLP/HTTP.

Owns the `--otlp-endpoint` / `--otlp-content` options (`add_arguments`), the tracer provider
of one served `Service` (`Tracing`, made by `start`, flushed and shut down by `close`), and the
ASGI middleware that reads an incoming W3C `traceparent` (`install`), so a request's span
joins its caller's trace. The span carries the GenAI attributes (`gen_ai.operation.name`,
`gen_ai.provider.name`, `gen_ai.request.*`, `gen_ai.response.*`, `gen_ai.usage.*`) and
Prism's own (`prism.*`: the family, the anomalies by kind, the verdict of engine/record/
verdict.py, the prompt tokens by source, the guided tokens, the timings), with one
`prism.anomaly` event per anomaly. Message content (`gen_ai.input.messages`,
`gen_ai.output.messages`, an anomaly's text) goes out only with `--otlp-content`.

The standard variables hold: OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
turn the export on (`--otlp-endpoint` overrides both), and the SDK reads the headers, timeout,
compression, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, the sampler and the batch settings.

Threads: the span starts in the listener's "start" update, on the thread that runs
`Service.submit` (a worker thread of the route, which carries the route's context, so the
middleware's parent is seen there); anomalies are noted and the span is ended on the engine
thread, where ending only appends it to the BatchSpanProcessor's queue: the export (an HTTP
POST to the collector) runs on the processor's own thread, so a collector that is down or
never answers costs a request nothing. A failure in this listener is logged, never raised
into the engine thread. Nothing here is imported by engine/; opentelemetry is imported only
when the export is on.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import logging
import os
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from engine.parse.events import ANOMALY, GUIDED_TOKEN, Event
from engine.record.verdict import verdict_of
from engine.service import Run, RunUpdate, Service

log = logging.getLogger("prism")

PROVIDER = "prism"  # gen_ai.provider.name: the server that generated (not a known vendor)
TRACES_PATH = "/v1/traces"
CLOSE_S = 5.0  # the most a stop waits for the last spans to reach the collector
# The response ids the APIs give (app/api/openai.py, anthropic.py, responses.py).
_RESPONSE_ID = {"openai": "chatcmpl-{}", "anthropic": "msg_{}", "responses": "resp_{}"}

# The caller's trace, from its `traceparent` (set per request by `TraceContext`; the route's
# worker thread inherits it).
_PARENT: contextvars.ContextVar[Any] = contextvars.ContextVar("prism_trace_parent",
                                                              default=None)
# The export of each traced service (or catalog: CatalogTracing).
_TRACINGS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


# -- options -------------------------------------------------------------------------------


def traces_url(text: str) -> str:
    """--otlp-endpoint: a collector's base URL (http://localhost:4318, to which /v1/traces is
    added, as for OTEL_EXPORTER_OTLP_ENDPOINT) or the full traces URL (any other path)."""
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(f"not an http(s) URL: {text!r}")
    url = text.strip()
    return url.rstrip("/") + TRACES_PATH if parts.path in ("", "/") else url


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--otlp-endpoint", type=traces_url, default=None, metavar="URL",
                   help="export one OpenTelemetry span per request (GenAI conventions) over "
                   "OTLP/HTTP to this collector (http://localhost:4318, or its full /v1/traces "
                   "URL); default: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or "
                   "$OTEL_EXPORTER_OTLP_ENDPOINT, else no export (serve and the window)")
    p.add_argument("--otlp-content", action="store_true",
                   help="put the prompt's messages and the reply in the spans (default: "
                   "counts, kinds and timings only)")


def _endpoint(args: argparse.Namespace) -> str | None:
    """Where spans go: the flag, else the standard variables (the exporter reads them), else
    nowhere. OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER=none turn the variables' export off."""
    flag = getattr(args, "otlp_endpoint", None)
    if flag:
        return flag
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true" or \
            os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return None
    traces = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        return traces
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    return base.rstrip("/") + TRACES_PATH if base else None


# -- wiring --------------------------------------------------------------------------------


def _url(args: argparse.Namespace) -> str | None:
    url = _endpoint(args)
    if url is None:
        return None
    for var in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        if os.environ.get(var, "http/protobuf").strip() != "http/protobuf":
            log.warning("prism: %s=%s is not supported; traces go over http/protobuf", var,
                        os.environ[var])
            break
    content = bool(getattr(args, "otlp_content", False))
    print(f"prism: exporting traces to {url} (OTLP/HTTP"
          f"{', with message content' if content else ''})", file=sys.stderr, flush=True)
    return url


def start(args: argparse.Namespace, service: Service) -> Tracing | None:
    """Export `service`'s requests as spans, if the options or the environment ask for it
    (None otherwise). Main thread, at start-up."""
    url = _url(args)
    if url is None:
        return None
    return Tracing(service, url, content=bool(getattr(args, "otlp_content", False)))


def start_catalog(args: argparse.Namespace, catalog) -> CatalogTracing | None:
    """Export the requests of every model of `catalog` (engine/catalog.py) as spans, each
    model's from its load to its unload, through one provider; None when nothing asks for
    it. Main thread, at start-up; `close(catalog)` ends it."""
    url = _url(args)
    if url is None:
        return None
    return CatalogTracing(catalog, url, content=bool(getattr(args, "otlp_content", False)))


def close(owner) -> None:
    """Flush and shut down the export of `owner` (a service or a catalog), if it has one.
    Every stop path calls it, after the engines are closed (a run the close cancels ends its
    span first)."""
    tracing = _TRACINGS.pop(owner, None)
    if tracing is not None:
        tracing.close()


def install(app, owner) -> None:
    """Have `app` read the caller's trace context (W3C traceparent) when `owner` (its service,
    or its catalog) is traced; before the app starts."""
    if owner is not None and owner in _TRACINGS:
        app.add_middleware(TraceContext)


class TraceContext:
    """Pure ASGI middleware: the request's propagation headers (traceparent, tracestate, as
    OTEL_PROPAGATORS says) become the parent of the span its run starts. Loop thread."""

    def __init__(self, app) -> None:
        self.app = app
        from opentelemetry import propagate

        self._extract = propagate.extract

    async def __call__(self, scope, receive, send) -> None:
        headers = scope.get("headers") if scope["type"] == "http" else None
        if not headers or not any(k == b"traceparent" for k, _ in headers):
            await self.app(scope, receive, send)
            return
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers}
        token = _PARENT.set(self._extract(carrier))
        try:
            await self.app(scope, receive, send)
        finally:
            _PARENT.reset(token)


# -- the spans -----------------------------------------------------------------------------


@dataclass
class _Live:
    """A run's open span and the anomalies seen so far, with their times (ns since the epoch)."""

    span: Any
    anomalies: list[tuple[Event, int | None]] = field(default_factory=list)


class Tracing:
    """The tracer provider of one service, and its listener. See the module docstring."""

    def __init__(self, service: Service, url: str, *, content: bool = False,
                 provider: Any = None) -> None:
        # `provider`: a catalog's, shared by its models and shut down by it (None: our own).
        from opentelemetry.trace import SpanKind, Status, StatusCode

        from app.api.metrics import model_info
        from app.api.server import version

        self.service = service
        self.url = url
        self.content = content
        self._kind, self._status, self._error = SpanKind.SERVER, Status, StatusCode.ERROR
        self._owns = provider is None
        self.provider = provider if provider is not None else make_provider(url)
        self.tracer = self.provider.get_tracer("prism", version())
        info = model_info(service).to_dict()
        engine = service.engine
        self._upstream = bool(getattr(engine, "base", ""))
        self._fixed: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.response.model": str(getattr(engine, "name", "")) or service.pack.name,
            "prism.pack": service.pack.name,
            "prism.engine": info["engine"],
            "prism.model.file": info["file"],
            "prism.model.quant": info["quant"],
            "prism.template": info["template"],
        }
        # Token times are perf_counter values; spans want ns since the epoch.
        self._epoch = time.time() - time.perf_counter()
        self._live: dict[str, _Live] = {}
        self._closed = False
        _TRACINGS[service] = self
        service.add_listener(self.on_update)

    # listener: any thread (see the module docstring) -----------------------------------------

    def on_update(self, upd: RunUpdate) -> None:
        kind = upd.kind
        if kind == "events":
            if upd.events:
                self._note(upd)
            return
        try:
            if kind == "start":
                self._start(upd.run)
            elif kind == "finish":
                self._finish(upd.run)
            elif kind == "refused":  # by the template: no start, no job
                self._start(upd.run)
                self._finish(upd.run, refused="template")
        except Exception:  # never into the engine thread: the request is not ours to fail
            log.exception("[prism] could not trace %s", upd.run.id)

    def _note(self, upd: RunUpdate) -> None:
        live = self._live.get(upd.run.id)
        if live is None:
            return
        for ev in upd.events:
            if ev.kind == ANOMALY:
                t = upd.token.t if upd.token is not None else time.perf_counter()
                live.anomalies.append((ev, int((t + self._epoch) * 1e9)))

    def _start(self, run: Run) -> None:
        request = run.request
        model = request.model or self.service.pack.name
        attrs: dict[str, Any] = {
            **self._fixed,
            "gen_ai.request.model": model,
            "gen_ai.request.temperature": request.sampling.temperature,
            "gen_ai.request.top_p": request.sampling.top_p,
            "gen_ai.request.top_k": request.sampling.top_k,
            "prism.request_id": run.id,
            "prism.api": request.api,
            "prism.family": run.reading.family,
        }
        if request.max_tokens is not None:
            attrs["gen_ai.request.max_tokens"] = request.max_tokens
        if request.sampling.seed is not None:
            attrs["gen_ai.request.seed"] = request.sampling.seed
        if request.stop:
            attrs["gen_ai.request.stop_sequences"] = list(request.stop)
        if request.tools:
            attrs["prism.tools"] = len(request.tools)
        if self.content:  # here, on the route's worker thread, not on the engine's
            attrs["gen_ai.input.messages"] = json.dumps(input_messages(run), ensure_ascii=False)
        span = self.tracer.start_span(f"chat {model}", context=_PARENT.get(), kind=self._kind,
                                      start_time=int(run.created * 1e9), attributes=attrs)
        self._live[run.id] = _Live(span)

    def _finish(self, run: Run, refused: str = "") -> None:
        live = self._live.pop(run.id, None)
        if live is None:
            return
        span, fin, result = live.span, run.finish, run.result
        if fin is None or result is None:
            span.end()
            return
        t = fin.timings
        # As the client is told (app/api/runs.py usage_numbers, and the metrics' finish).
        reason = fin.reason if run.reading.calls_as_text else result.finish_reason
        verdict = verdict_of(run.events, fin.reason, error=fin.error,
                             stop_sequence=fin.stop_sequence, status=fin.status,
                             upstream=self._upstream,
                             refused=refused)
        attrs: dict[str, Any] = {
            "gen_ai.response.id": _RESPONSE_ID.get(run.request.api, "{}").format(run.id),
            "gen_ai.response.finish_reasons": [reason],
            "gen_ai.usage.input_tokens": t.prompt_tokens or run.prompt_tokens,
            "gen_ai.usage.output_tokens": t.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": t.cached_tokens,
            "prism.verdict": verdict.kind,
            "prism.verdict.detail": verdict.detail,
            "prism.prompt_tokens.slot": t.slot_tokens,
            "prism.prompt_tokens.disk": t.disk_tokens,
            "prism.prompt_tokens.computed": t.computed_tokens,
            "prism.guided_tokens": sum(1 for ev in run.events if ev.kind == GUIDED_TOKEN),
            "prism.anomalies": sum(result.anomalies.values()),
            "prism.timings.queue_ms": t.queue_ms,
            "prism.timings.prompt_ms": t.prompt_ms,
            "prism.timings.decode_ms": t.decode_ms,
            "prism.slot": t.slot,
        }
        if t.output_tokens:
            attrs["gen_ai.response.time_to_first_chunk"] = t.ttft_ms / 1000.0
            attrs["prism.timings.ttft_ms"] = t.ttft_ms
        if t.draft_tokens:
            attrs["prism.draft_tokens"] = t.draft_tokens
            attrs["prism.accepted_tokens"] = t.accepted_tokens
        for kind, n in result.anomalies.items():
            if n:
                attrs[f"prism.anomalies.{kind}"] = n
        if run.notes:
            attrs["prism.notes"] = list(run.notes)
        if self.content:
            attrs["gen_ai.output.messages"] = json.dumps(output_messages(run, reason),
                                                         ensure_ascii=False)
        if fin.reason == "error":
            attrs["error.type"] = str(fin.status) if fin.status else verdict.kind
            span.set_status(self._status(self._error, (fin.error or "")[:500]))
        span.set_attributes(attrs)
        for ev, at in live.anomalies:
            event = {"prism.anomaly.kind": ev.anomaly or "", "prism.anomaly.start": ev.span[0],
                     "prism.anomaly.end": ev.span[1]}
            if self.content:
                event["prism.anomaly.text"] = ev.text
            span.add_event("prism.anomaly", event, timestamp=at)
        # Ending only queues the span for the processor's thread (BatchSpanProcessor.on_end).
        span.end()

    # life ---------------------------------------------------------------------------------

    def close(self, timeout: float = CLOSE_S) -> bool:
        """Stop listening, end the spans of runs that never finished, and shut the provider
        down (its last batch exported) on a thread of its own for at most `timeout` seconds:
        a collector that never answers must not hold the process. True when it finished."""
        if self._closed:
            return True
        self._closed = True
        self.service.remove_listener(self.on_update)
        for live in list(self._live.values()):
            live.span.end()
        self._live.clear()
        return shut_down(self.provider, self.url, timeout) if self._owns else True


def make_provider(url: str):
    """A tracer provider exporting over OTLP/HTTP to `url` in batches, on its own thread."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from app.api.server import version

    resource = Resource.create({SERVICE_VERSION: version()})
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "prism"}))  # no OTEL_SERVICE_NAME
    # shutdown_on_exit=False: `close` shuts it down, with a bound; the SDK's own atexit
    # hook would wait up to 30 s on a collector that never answers.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url)))
    return provider


def shut_down(provider, url: str, timeout: float = CLOSE_S) -> bool:
    """Shut `provider` down (its last batch exported) on a thread of its own for at most
    `timeout` seconds: a collector that never answers must not hold the process. True when
    it finished."""
    done = threading.Event()

    def shutdown() -> None:
        try:
            provider.shutdown()
        finally:
            done.set()

    threading.Thread(target=shutdown, name="prism-otel-close", daemon=True).start()
    if not done.wait(timeout):
        log.warning("prism: the trace collector at %s did not take the last spans in "
                    "%.0f s; they are dropped", url, timeout)
        return False
    return True


class CatalogTracing:
    """The spans of a catalog's models: one provider, and a `Tracing` on each model's service
    while it is loaded (the catalog tells its services as they are built and closed, on its
    loader thread). A model's spans carry its id as `gen_ai.request.model`, as every span
    does, and its file in `prism.model.file`."""

    def __init__(self, catalog, url: str, *, content: bool = False) -> None:
        self.catalog, self.url, self.content = catalog, url, content
        self.provider = make_provider(url)
        self._lock = threading.Lock()
        self._models: dict[str, Tracing] = {}
        self._closed = False
        _TRACINGS[catalog] = self
        catalog.watch_services(self._on_service)

    def _on_service(self, model: str, service: Service | None) -> None:
        with self._lock:
            if self._closed:
                return
            old = self._models.pop(model, None)
            if service is not None:
                self._models[model] = Tracing(service, self.url, content=self.content,
                                              provider=self.provider)
        if old is not None:  # its engine is closed: its runs have ended their spans
            old.close()
            _TRACINGS.pop(old.service, None)

    def close(self, timeout: float = CLOSE_S) -> bool:
        with self._lock:
            if self._closed:
                return True
            self._closed = True
            models, self._models = list(self._models.values()), {}
        self.catalog.unwatch_services(self._on_service)
        for tracing in models:
            tracing.close()
            _TRACINGS.pop(tracing.service, None)
        return shut_down(self.provider, self.url, timeout)


# -- content (only with --otlp-content) ----------------------------------------------------


def input_messages(run: Run) -> list[dict]:
    """The request's messages in the GenAI conventions' input shape (role and parts)."""
    out: list[dict] = []
    for m in run.request.messages:
        if m.role == "tool":
            parts: list[dict] = [{"type": "tool_call_response", "id": m.tool_call_id or "",
                                  "response": m.content}]
        else:
            parts = []
            if m.reasoning_content:
                parts.append({"type": "reasoning", "content": m.reasoning_content})
            if m.content:
                parts.append({"type": "text", "content": m.content})
            for call in m.tool_calls:
                fn = call.get("function", {})
                parts.append({"type": "tool_call", "id": call.get("id", ""),
                              "name": fn.get("name", ""), "arguments": fn.get("arguments")})
        out.append({"role": m.role, "parts": parts})
    return out


def output_messages(run: Run, finish_reason: str) -> list[dict]:
    """The reply in the GenAI conventions' output shape: its reasoning, text and calls."""
    result = run.result
    parts: list[dict] = []
    if result is not None:
        if result.reasoning:
            parts.append({"type": "reasoning", "content": result.reasoning})
        if result.content:
            parts.append({"type": "text", "content": result.content})
        parts += [{"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}
                  for c in result.tool_calls]
    return [{"role": "assistant", "parts": parts, "finish_reason": finish_reason}]
