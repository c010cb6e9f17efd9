"""The window serving several models: `prism --models-dir DIR` (or several `--model`, or
`--models-preset`), the catalog of app/catalog.py behind the window and its server.

Owns `CatalogInspector` (app/gui.py's `Inspector` with a catalog where the one service was:
the server's routes find each request's model in it, Compose and *Re-run on…* name one of its
models, and every way out closes the catalog, then the recording) and `CatalogView`, what the
window shows of the catalog: the model list (widgets/model_list.py, a dock), each model's
load, unload and eviction as a marker on the Charts timeline and a line in the status bar,
each resident model's chart source (a track's charts are its model's), and the live feed
attached to every model's service while it is resident (inspector/tracks.py `LiveFeed`).

Threads: the catalog's loader thread loads and unloads; its listener here only appends the
event to a deque, and its service watcher attaches the feed to a new service before the model
takes its first request (a list append and a listener added: no widget). The GUI thread drains
the deque on the window's frame timer (as the live feed's) and calls the catalog's `load`,
`unload` and `pin`, which only mark what the loader thread is to do. Compose's request for a
model that is not resident waits on a thread of its own ("prism-compose"); a rerun on one of
the models leases it on the rerun's thread ("prism-rerun"), so the model is not evicted
under it.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import threading
import time
from collections import deque

from app import telemetry
from app.gui import RERUN_JOIN_S, Inspector, recordings_folder, rerun_packs
from engine.catalog import Catalog, CatalogEvent
from engine.chat.request import ChatRequest
from engine.metrics import Metrics
from engine.record.recording import Recorder
from engine.service import Run, Service
from inspector.rerun import EngineChoice, RerunFeed, RerunPlan

log = logging.getLogger("prism")

EVENT_COLOURS = {"loaded": "#1dd1a1", "unloaded": "#feca57", "failed": "#ff6b6b"}


class ModelChart:
    """One resident model's charts: a `TrackSource` with no tracks of its own (the live
    feed makes them), whose metrics are the model's; the charts show it for its tracks."""

    def __init__(self, model: str, service: Service) -> None:
        self.model, self.service = model, service
        self.label = f"{model} (live)"

    @property
    def metrics(self) -> Metrics | None:
        return self.service.metrics

    def poll(self, now: float | None = None) -> list:
        return []

    def sample(self) -> None:
        if self.service.metrics is not None:
            self.service.metrics.sample()


class CatalogView:
    """What the window shows of the catalog (see the module docstring). GUI thread, but for
    `_on_event` and `_on_service` (the catalog's loader thread)."""

    def __init__(self, catalog: Catalog, window, feed) -> None:
        from widgets.model_list import ModelList

        self.catalog, self.window, self.feed = catalog, window, feed
        self.events: deque[tuple[CatalogEvent, float]] = deque()
        self.notes: deque[tuple[str, bool]] = deque()  # from other threads, for the status bar
        self.charts: dict[str, ModelChart] = {}
        self._services: dict[str, Service] = {}
        self.list = ModelList()
        self.list.load_requested.connect(catalog.load)
        self.list.unload_requested.connect(catalog.unload)
        self.list.pin_toggled.connect(self._pin)
        self.dock = window.add_models(self.list)
        window.compose.set_models(catalog.ids)
        window.reruns.models = list(catalog.ids)
        catalog.add_listener(self._on_event)
        catalog.watch_services(self._on_service)
        for model, service in catalog.services():  # resident before the window (pinned)
            self._on_service(model, service)
            self._add_chart(model)
        window.timer.timeout.connect(self.poll)
        self.show()

    def close(self) -> None:
        self.window.timer.timeout.disconnect(self.poll)
        self.catalog.remove_listener(self._on_event)
        self.catalog.unwatch_services(self._on_service)

    # -- the catalog's loader thread -------------------------------------------------------

    def _on_event(self, ev: CatalogEvent) -> None:
        self.events.append((ev, time.perf_counter()))

    def _on_service(self, model: str, service: Service | None) -> None:
        if service is not None:
            self._services[model] = service
            self.feed.add_service(service, model)
        else:
            old = self._services.pop(model, None)
            if old is not None:
                self.feed.remove_service(old)

    # -- the GUI thread --------------------------------------------------------------------

    def poll(self) -> None:
        """The frame timer: apply the events that arrived since the last frame."""
        while self.notes:
            text, error = self.notes.popleft()
            self.window.say(text, error=error)
        if not self.events:
            return
        from widgets.metrics_chart import Marker

        while self.events:
            ev, t = self.events.popleft()
            if ev.kind == "loaded":
                self._add_chart(ev.model)
            elif ev.kind == "unloaded":
                self._drop_chart(ev.model)
            if ev.kind in EVENT_COLOURS:
                why = {"evicted": "evicted", "ttl": "idle past its ttl"}.get(ev.reason, "")
                label = f"{ev.model} {ev.kind}" + (f" ({why})" if why else "")
                self.window.charts.add_marker(Marker(t, label, EVENT_COLOURS[ev.kind]))
                self.window.say(label + (f": {ev.status.error}" if ev.kind == "failed"
                                         else ""), error=ev.kind == "failed")
        self.show()

    def show(self) -> None:
        self.list.show_statuses(self.catalog.statuses(), self.catalog.max_memory)

    def _pin(self, model: str, on: bool) -> None:
        self.catalog.pin(model, on)
        self.show()

    def _add_chart(self, model: str) -> None:
        service = self._services.get(model)
        if service is None or model in self.charts:
            return
        chart = self.charts[model] = ModelChart(model, service)
        self.window.sources.append(chart)
        charts = self.window.charts
        if charts.source is None or charts.source.metrics is None:
            charts.set_source(chart, chart.label)  # the first model loaded: its charts

    def _drop_chart(self, model: str) -> None:
        chart = self.charts.pop(model, None)
        if chart is None:
            return
        self.window.sources.remove(chart)
        if self.window.charts.source is chart:
            rest = next(iter(self.charts.values()), self.window.sources[0])
            self.window.charts.set_source(rest, getattr(rest, "label", ""))


class CatalogInspector(Inspector):
    """The window, the feed, the playback and the server for a catalog of models (see the
    module docstring). GUI thread."""

    def __init__(self, catalog: Catalog, recorder: Recorder | None, *,
                 load_timeout: float = 300.0, host: str = "127.0.0.1", port: int = 8421,
                 max_documents: int = 32, max_tokens: int | None = None, settings=None,
                 geometry: tuple[int, int] | None = None) -> None:
        from PySide6.QtCore import QTimer

        from inspector.playback import Playback
        from inspector.tracks import LiveFeed, TrackStore
        from widgets.main_window import MainWindow

        self.catalog, self.recorder, self.load_timeout = catalog, recorder, load_timeout
        self.service = None  # type: ignore[assignment]
        self.host, self.port = host, port
        self.max_tokens, self.max_queue = max_tokens, None
        self.store = TrackStore(max_documents=max_documents)
        self.feed = LiveFeed(None, self.store)
        self.playback = Playback(self.store)
        self.window = MainWindow(self.store, self.playback, [self.feed, self.playback],
                                 submit=self.submit,
                                 title=f"Prism — {len(catalog.ids)} models "
                                 f"({', '.join(catalog.ids)})",
                                 rerun=self.start_rerun, packs=rerun_packs(),
                                 guard_calls=True, settings=settings, size=geometry)
        self._exit = contextlib.ExitStack()
        self.window.set_recordings(recordings_folder(),
                                   recorder.path if recorder is not None else None)
        self.view = CatalogView(catalog, self.window, self.feed)
        self._reruns: list[tuple[RerunFeed, threading.Thread]] = []
        self.window.server_toggled.connect(self._server_toggled)
        self.window.free_port_chosen.connect(self._use_port)
        self.closed = False
        self.server = None
        self.url: str | None = None
        self._server_task = None
        self._sock = None
        self._toggle_task = None
        self._status = QTimer(self.window)
        self._status.timeout.connect(self.update_status)
        self._status.start(500)
        self.update_status()

    @classmethod
    def from_args(cls, args: argparse.Namespace, **kw) -> CatalogInspector:
        """The catalog the command line describes (nothing loaded but the pinned models)
        behind a new window."""
        from app.catalog import build_catalog

        catalog, recorder = build_catalog(args)
        return cls(catalog, recorder, load_timeout=args.load_timeout, port=args.port,
                   max_tokens=args.max_tokens, **kw)

    @property
    def records(self) -> bool:
        return self.recorder is not None

    def app_state(self, host: str, port: int):
        from app.api.state import AppState, ServerConfig

        return AppState(service=None, catalog=self.catalog,
                        config=ServerConfig(host=host, port=port, max_tokens=self.max_tokens,
                                            load_timeout=self.load_timeout))

    def update_status(self) -> None:
        statuses = self.catalog.statuses()
        loaded = [s.id for s in statuses if s.state == "loaded"]
        state = "loading" if any(s.state == "loading" for s in statuses) else \
            "generating" if any(s.busy for s in statuses) else "idle"
        waiting = 0
        for _model, service in self.catalog.services():
            with contextlib.suppress(Exception):  # a model closing meanwhile
                waiting += service.engine.queue_depth()
        self.window.set_engine_status(
            f"{len(loaded)}/{len(statuses)} loaded ({', '.join(loaded) or 'none'})", state,
            waiting)

    # -- Compose ---------------------------------------------------------------------------

    def submit(self, request: ChatRequest) -> Run | None:
        """Compose's Send: to the model the request names, at once when it is resident;
        else None, and the request goes from a thread of its own once it has loaded. An
        unknown or failed model raises (the box shows why)."""
        model = self.catalog.resolve(request.model or self.catalog.ids[0])
        lease = self.catalog.lease(model)
        if lease is None:
            threading.Thread(target=self._submit_when_loaded, args=(model, request),
                             name="prism-compose", daemon=True).start()
            return None
        try:
            return lease.service.submit(request)
        finally:
            lease.release()

    def _submit_when_loaded(self, model: str, request: ChatRequest) -> None:
        try:
            lease = self.catalog.acquire(model, self.load_timeout)
        except Exception as e:  # it failed or timed out: the status bar says so
            self.view.notes.append((f"Compose: {model} did not load: {e}", True))
            return
        try:
            lease.service.submit(request)
        except Exception as e:  # a refusal (context, template) is shown, not raised
            self.view.notes.append((f"Compose: {type(e).__name__}: {e}", True))
        finally:
            lease.release()

    # -- reruns ----------------------------------------------------------------------------

    def _rerun(self, feed: RerunFeed, choice: EngineChoice, plan: RerunPlan) -> None:
        """A rerun on one of the catalog's models leases it for the whole rerun and records
        in the window's recording; any other engine is built as in the one-model window."""
        if choice.kind != "catalog":
            super()._rerun(feed, choice, plan)
            return
        from app import rerun

        try:
            lease = self.catalog.acquire(choice.value, self.load_timeout)
        except Exception as e:
            feed.fail(f"cannot re-run on {choice.describe()}: {e}")
            return
        try:
            service = lease.service
            feed.attach(service, shared=True)

            def before(original, request) -> None:
                self.feed.claim(request)  # the rerun's feed shows it, not the live one
                feed.expect(original, request)

            report = rerun.rerun_requests(
                service, plan.requests, self.recorder,
                overrides=rerun.Overrides(max_tokens=choice.max_tokens),
                progress=feed.say, before=before, sent=feed.sent, stopped=feed.stopped)
            feed.done(f"re-run of {plan.label} on {choice.value}: {report.done}/"
                      f"{report.total} requests, {report.tokens} tokens"
                      + (f", {report.failed} not sent" if report.failed else "")
                      + (" (stopped)" if report.interrupted else ""))
        except Exception as e:
            log.exception("[prism] the re-run on %s failed", choice.describe())
            feed.fail(f"the re-run on {choice.describe()} failed: {e}")
        finally:
            lease.release()

    # -- life ------------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop everything in order: reruns, the server, the feed, every model's engine (the
        catalog), then the recording. Once."""
        if self.closed:
            return
        self.closed = True
        self._status.stop()
        for feed, _thread in self._reruns:
            feed.cancel()
        for feed, thread in self._reruns:
            thread.join(RERUN_JOIN_S)
            feed.close()
        await self.stop_server()
        self.view.close()
        self.feed.close()
        self.catalog.close()
        telemetry.close(self.catalog)  # the last spans, within a bound
        self._exit.close()
        if self.recorder is not None:
            self.recorder.close()
        log.info("[prism] stopped the server, the models and the recorder%s",
                 f" ({self.recorder.path})" if self.recorder is not None else "")
