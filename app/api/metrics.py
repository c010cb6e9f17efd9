"""GET /metrics: Prometheus text by default, JSON (`Metrics.snapshot()`, the
layout the window's chart reads) on request.

Owns `PrometheusExporter` and the route. Each app gets its own `CollectorRegistry` (two apps
in one process, as in the tests, never share or clash). The exporter has two halves:

- an observer on `engine.metrics.Metrics` (called on the engine thread, only observing into
  thread-safe histograms): time to first token, inter-token latency, request latency;
- a collector that reads `Metrics.snapshot()` at scrape time for every counter and gauge
  (requests by finish reason, prompt / cached / output tokens, prompt tokens by source (slot,
  disk, computed), anomalies by kind, implicit ends, guided tokens (those the call guard chose
  instead of the model's own draw: a fact about the run, so not among the anomalies),
  running and waiting requests, live tokens/s, a model info series naming the model file, its
  quant, family, template hash and engine, as `prism stats` groups recordings). Taking the
  counters from the same totals the JSON shows means the two views always agree.

Serving several models (engine/catalog.py), `CatalogExporter` keeps the same three histograms
with one series per model (label `model`, the catalog's id): it observes each model's service
from its load to its unload (a catalog service watcher, on the catalog's loader thread, called
before the model takes its first request), so a model's
histograms go on counting across loads while its snapshot figures start again.

JSON is returned when the client sends `Accept: application/json` or `?format=json`.
Runs on the asyncio loop's thread (the route), the engine thread (the observer) and the
catalog's loader thread (attaching and detaching a model's observer).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from app.api.errors import APIError
from app.api.state import get_state
from engine.grammar.bounds import relaxed_total
from engine.record.model_info import LOCAL, REPLAY, ModelInfo, describe
from engine.record.replay import ReplayEngine
from engine.service import Service

router = APIRouter()

# The labels `prism_model_info` takes from engine/record/model_info.py, as `prism stats` names
# its groups (model file = `file`).
_INFO_LABELS = ("file", "quant", "family", "template", "engine")


def model_info(service: Service) -> ModelInfo:
    """What the service generates with: its pack's model file and the engine ("local",
    "replay", or the upstream's URL)."""
    engine = service.engine
    base = getattr(engine, "base", None)
    where = base if isinstance(base, str) and base else (
        REPLAY if isinstance(engine, ReplayEngine) else LOCAL)
    return describe(service.pack, where, str(getattr(engine, "name", "")))

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_ITL_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0)


class _SnapshotCollector:
    def __init__(self, service: Service, model: str,
                 preparing: Callable[[], int] = lambda: 0) -> None:
        self.service = service
        self.model = model
        # Requests accepted and still being prepared (app/api/admission.py): they wait too.
        self.preparing = preparing
        # Read once: the model file does not change while the app serves it (the GGUF's
        # header is read for its quant).
        self.info = model_info(service).to_dict()

    def collect(self):
        metrics = self.service.metrics
        model = self.model
        if metrics is None:
            return
        snap = metrics.snapshot()
        totals, live = snap["totals"], snap["live"]
        info = GaugeMetricFamily("prism_model_info", "The model being served: which model "
                                 "file (its quant, family, template hash, engine) the counts "
                                 "are for.",
                                 labels=["model", "pack", "n_ctx", *_INFO_LABELS])
        info.add_metric([model, self.service.pack.name, str(self.service.engine.n_ctx),
                         *(self.info[k] for k in _INFO_LABELS)], 1)
        yield info
        started = CounterMetricFamily("prism_requests_started", "Requests submitted.",
                                      labels=["model"])
        started.add_metric([model], totals["requests"])
        yield started
        finished = CounterMetricFamily("prism_requests", "Finished requests by finish reason.",
                                       labels=["model", "finish_reason"])
        for reason, n in sorted(totals["finish_reasons"].items()):
            finished.add_metric([model, reason], n)
        yield finished
        for key, help_text in (("prompt_tokens", "Prompt tokens of finished requests."),
                               ("cached_tokens", "Prompt tokens reused from the KV cache."),
                               ("output_tokens", "Generated tokens.")):
            fam = CounterMetricFamily(f"prism_{key}", help_text, labels=["model"])
            fam.add_metric([model], totals[key])
            yield fam
        # A family of its own, not a `source` label on prism_prompt_tokens: summing that one
        # over its labels would then count every prompt token twice.
        by_source = CounterMetricFamily(
            "prism_prompt_tokens_by_source",
            "Prompt tokens of finished requests by where they came from: reused from a slot's "
            "KV cache, loaded from the disk cache, or computed.", labels=["model", "source"])
        for source, n in totals["prompt_tokens_by_source"].items():
            by_source.add_metric([model, source], n)
        yield by_source
        anomalies = CounterMetricFamily("prism_anomalies", "Parser anomalies by kind.",
                                        labels=["model", "kind"])
        for kind, n in totals["anomalies"].items():
            anomalies.add_metric([model, kind], n)
        yield anomalies
        implicit = CounterMetricFamily(
            "prism_implicit_reasoning_ends",
            "Tool calls written inside the thinking that ended it implicitly.", labels=["model"])
        implicit.add_metric([model], totals["implicit_reasoning_ends"])
        yield implicit
        for key, help_text in (
                ("draft_tokens", "Speculative draft tokens verified (--speculate ngram)."),
                ("accepted_tokens", "Of the draft tokens, those kept: output tokens that "
                                    "needed no decode step of their own.")):
            fam = CounterMetricFamily(f"prism_{key}", help_text, labels=["model"])
            fam.add_metric([model], totals[key])
            yield fam
        guided = CounterMetricFamily(
            "prism_guided_tokens",
            "Tokens the call guard chose where the call's grammar refused the model's own draw "
            "(engine/backends/llama/guard.py).", labels=["model"])
        guided.add_metric([model], totals["guided_tokens"])
        yield guided
        # Schema bounds too large for a grammar, dropped while sampling (the output is still
        # checked against the whole schema): engine/grammar/bounds.py.
        yield CounterMetricFamily(
            "prism_schema_bounds_relaxed",
            "Schema bounds (maxLength, maxItems, {m,n}, large enums, patterns) left out of a "
            "grammar because they exceed its limits; the output is still checked.",
            value=relaxed_total())
        budget = CounterMetricFamily(
            "prism_reasoning_budget",
            "Replies whose reasoning reached its budget and was closed by the family's writer "
            "(--reasoning-budget, a request's reasoning_budget).", labels=["model"])
        budget.add_metric([model], totals.get("reasoning_budget", 0))
        yield budget
        waiting = live["queue_depth"] + self.preparing()
        for name, help_text, value in (
            ("prism_requests_running", "Requests started and not finished, less the waiting.",
             max(0, live["in_flight"] - waiting)),
            ("prism_requests_waiting", "Requests accepted and not yet started: being "
             "prepared or queued for the engine (what --max-queue limits).", waiting),
            ("prism_tokens_per_second", "Output tokens per second, recent window.",
             live["tokens_per_s"]),
            ("prism_slots_busy", "Parallel sequences serving a request now.", live["slots_busy"]),
            ("prism_slots_total", "Parallel sequences (--parallel).", live["slots_total"]),
        ):
            g = GaugeMetricFamily(name, help_text, labels=["model"])
            g.add_metric([model], value)
            yield g


class PrometheusExporter:
    """A registry per app; observe() hooks it to the service's Metrics, close() unhooks it."""

    def __init__(self, service: Service, model: str,
                 preparing: Callable[[], int] = lambda: 0) -> None:
        """`model`: the label of every series, the id /v1/models reports (AppState.model_id),
        so a dashboard can join the two; `preparing`: the requests admitted and not yet
        queued (the admission's count)."""
        self.service = service
        self.model = model
        self.registry = CollectorRegistry()
        self.ttft = Histogram("prism_time_to_first_token_seconds",
                              "Time from submission to the first output token.", ["model"],
                              registry=self.registry, buckets=_LATENCY_BUCKETS)
        self.itl = Histogram("prism_inter_token_latency_seconds",
                             "Time between consecutive output tokens.", ["model"],
                             registry=self.registry, buckets=_ITL_BUCKETS)
        self.latency = Histogram("prism_request_latency_seconds",
                                 "Time from submission to the end of the request.", ["model"],
                                 registry=self.registry, buckets=_LATENCY_BUCKETS)
        # Children created up front, so the series exist (at 0) before the first request;
        # on_token runs per token, so it keeps its child rather than looking it up.
        self._itl = self.itl.labels(self.model)
        self._ttft = self.ttft.labels(self.model)
        self._latency = self.latency.labels(self.model)
        self.registry.register(_SnapshotCollector(service, model, preparing))
        self._attached = False

    def observe(self) -> None:
        if self.service.metrics is not None and not self._attached:
            self.service.metrics.add_observer(self)
            self._attached = True

    def close(self) -> None:
        if self._attached:
            self._attached = False
            self.service.metrics.remove_observer(self)

    # observer hooks: engine thread
    def on_token(self, id: str, t: float, gap_s: float | None) -> None:
        if gap_s is not None:
            self._itl.observe(gap_s)

    def on_request_finished(self, id: str, finish_reason: str, timings, latency_s: float) -> None:
        if timings.output_tokens:
            self._ttft.observe(timings.ttft_ms / 1000.0)
        self._latency.observe(latency_s)

    def text(self) -> bytes:
        return generate_latest(self.registry)


class _ModelObserver:
    """One model's hooks into the catalog exporter's histograms (engine thread)."""

    def __init__(self, exporter: CatalogExporter, model: str) -> None:
        self._ttft = exporter.ttft.labels(model)
        self._itl = exporter.itl.labels(model)
        self._latency = exporter.latency.labels(model)

    def on_token(self, id: str, t: float, gap_s: float | None) -> None:
        if gap_s is not None:
            self._itl.observe(gap_s)

    def on_request_finished(self, id: str, finish_reason: str, timings, latency_s: float) -> None:
        if timings.output_tokens:
            self._ttft.observe(timings.ttft_ms / 1000.0)
        self._latency.observe(latency_s)


class CatalogExporter:
    """The latency histograms of a catalog's models, by model id: each resident model's
    `Metrics` is observed from its load to its unload. `observe()` starts, `close()` stops."""

    def __init__(self, catalog) -> None:
        self.catalog = catalog
        self.registry = CollectorRegistry()
        self.ttft = Histogram("prism_time_to_first_token_seconds",
                              "Time from submission to the first output token.", ["model"],
                              registry=self.registry, buckets=_LATENCY_BUCKETS)
        self.itl = Histogram("prism_inter_token_latency_seconds",
                             "Time between consecutive output tokens.", ["model"],
                             registry=self.registry, buckets=_ITL_BUCKETS)
        self.latency = Histogram("prism_request_latency_seconds",
                                 "Time from submission to the end of the request.", ["model"],
                                 registry=self.registry, buckets=_LATENCY_BUCKETS)
        # Every model's series exist from the start (at 0), resident or not.
        self._observers = {model: _ModelObserver(self, model) for model in catalog.ids}
        self._attached: dict[str, object] = {}  # model -> the Metrics observed
        self._lock = threading.Lock()
        self._on = False

    def observe(self) -> None:
        self._on = True
        self.catalog.watch_services(self._watch)
        for model, service in self.catalog.services():  # resident before the app (pinned)
            self._attach(model, service)

    def close(self) -> None:
        self._on = False
        self.catalog.unwatch_services(self._watch)
        with self._lock:
            attached, self._attached = self._attached, {}
        for model, metrics in attached.items():
            metrics.remove_observer(self._observers[model])

    def _watch(self, model: str, service: Service | None) -> None:  # the loader thread
        if service is not None:
            self._attach(model, service)
            return
        with self._lock:
            metrics = self._attached.pop(model, None)
        if metrics is not None:
            metrics.remove_observer(self._observers[model])

    def _attach(self, model: str, service: Service) -> None:
        metrics = service.metrics
        if metrics is None or not self._on:
            return
        with self._lock:
            if self._attached.get(model) is metrics:
                return
            old = self._attached.get(model)
            self._attached[model] = metrics
        if old is not None:
            old.remove_observer(self._observers[model])
        metrics.add_observer(self._observers[model])

    def text(self) -> bytes:
        return generate_latest(self.registry)


@router.get("/metrics")
async def metrics(request: Request):
    state = get_state(request)
    wants_json = request.query_params.get("format") == "json" or (
        "application/json" in request.headers.get("accept", "")
    )
    if state.catalog is not None:
        return catalog_metrics(state, wants_json, getattr(request.app.state, "prometheus", None))
    if wants_json:
        if state.service.metrics is None:
            raise APIError("not_found", "metrics are not collected by this server")
        return JSONResponse(state.service.metrics.snapshot())
    exporter: PrometheusExporter = request.app.state.prometheus
    return Response(exporter.text(), media_type=CONTENT_TYPE_LATEST)


def catalog_metrics(state, wants_json: bool, exporter: CatalogExporter | None = None):
    """Several models: each resident model's snapshot, labelled by its id (a model's figures
    start again when it is loaded again), then the exporter's histograms by model."""
    resident = [(model, svc) for model, svc in state.catalog.services()
                if svc.metrics is not None]
    if wants_json:
        return JSONResponse({"models": {model: svc.metrics.snapshot()
                                        for model, svc in resident}})
    registry = CollectorRegistry()
    for model, svc in resident:
        registry.register(_SnapshotCollector(svc, model))
    text = generate_latest(registry) + (exporter.text() if exporter is not None else b"")
    return Response(text, media_type=CONTENT_TYPE_LATEST)
