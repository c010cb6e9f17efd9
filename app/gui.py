"""The `prism gui` verb (and plain `prism`): the inspector window, with the server in its loop.

    prism [gui] [--pack NAME | --model FILE.gguf | --replay FILE...] [--port 8421]
                [--no-server] [--size WxH] [--screenshot FILE.png [--quit-after SECONDS]]

Owns `add_arguments`, `run` and `Inspector`, the wiring: one service (app.config), a
`LiveFeed` that carries its run updates to tracks, a `Playback` for recordings, the
`MainWindow`, the HTTP server (app.api.server) running in the same asyncio loop, which is
qasync's Qt loop, and the window's reruns (Request → Re-run on…: `start_rerun`). Threads:
everything here runs on the main (GUI) thread but a rerun, which builds the other engine's
service and runs `prism rerun`'s loop (app/rerun.py) on a thread of its own ("prism-rerun");
the engines run on their own threads and only append to the feeds' deques, which the window
drains on its ~30 Hz frame timer.

With `--models-dir`, `--models-preset` or several `--model` the window serves a catalog of models
(app/gui_catalog.py: `CatalogInspector`, the same window with a model list).

`--replay FILE...` serves those outputs to clients, as `prism serve --replay` does, and also
opens them in the window's playback (at 1× unless `--replay-speed` says otherwise).
`--screenshot` saves the window to a PNG when the replay has played out (or after
`--quit-after` seconds, 3 by default without a replay) and quits: how the README's picture is
made and how the window is checked without a display (at 1560×980, or `--size`).

Every way out (File → Quit, Ctrl+Q, the close button, SIGINT, SIGTERM, also during start-up)
ends `main` the same way: `Inspector.close` stops the reruns, the server, the feed, the engine
and the recorder in that order, and the process exits 0 (app/gui_quit.py). A busy port at start
leaves the server off and offers a free one (the status bar's *Use free port N*; the Server
button takes it too). The window's layout is kept in Qt's per-user settings.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from app import telemetry
from app.config import add_engine_arguments, port_number
from app.gui_quit import StopRequest, quit_by
from engine.chat.detect import UNKNOWN, format_label

if TYPE_CHECKING:  # the verbs share one parser: importing the engine here would slow `parse`
    from engine.service import Service
    from inspector.rerun import EngineChoice, RerunFeed, RerunPlan

log = logging.getLogger("prism")

SCREENSHOT_SETTLE_S = 0.6  # after a replay ends: let the charts take their next sample
SCREENSHOT_SIZE = (1560, 980)  # --screenshot without --size
RERUN_JOIN_S = 15.0  # at close: how long a cancelled rerun may take to free its engine


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_engine_arguments(p)
    # None = "not given": the window plays recordings at 1×, the served replay is instant.
    p.set_defaults(replay_speed=None)
    p.add_argument("--port", type=port_number, default=8421,
                   help="server port (default 8421; 0 picks a free one)")
    p.add_argument("--no-server", action="store_true", help="do not start the HTTP server "
                   "(it can be switched on from the window)")
    p.add_argument("--screenshot", type=Path, metavar="FILE.png",
                   help="save the window to this PNG once the replay has played (or after "
                   "--quit-after seconds) and quit")
    p.add_argument("--quit-after", type=float, metavar="SECONDS",
                   help="quit after this many seconds (with --screenshot: take it then)")
    p.add_argument("--size", type=window_size, metavar="WxH",
                   help="open the window at this size (e.g. 1280x800) instead of the last one")
    # Tests only: SIGUSR1 quits the window this way (app/gui_quit.py).
    p.add_argument("--quit-by", choices=("close", "menu", "keys"), help=argparse.SUPPRESS)



def rerun_packs() -> list[str]:
    """The built-in packs Re-run on… offers: those that come with a model (the default
    first); the others need a GGUF file, which the dialog takes too."""
    from app.config import DEFAULT_PACK
    from engine.chat.packs import PackError, builtin_packs

    try:
        specs = builtin_packs()
    except PackError:
        return [DEFAULT_PACK]
    named = [n for n, s in specs.items() if s.gguf_package or s.assemble_package]
    return sorted(named, key=lambda n: (n != DEFAULT_PACK, n))


def window_title(engine_name: str, pack) -> str:
    """The window's title: the engine, the pack and the family its output is read as, or that
    the template's call format is unknown (the output is then shown as content)."""
    label = format_label(pack.family)
    how = UNKNOWN if pack.format_unknown else (
        f"format {label}" if label != pack.family else f"family {pack.family}")
    return f"Prism — {engine_name} ({pack.name}, {how})"

class Inspector:
    """The window, the feed, the playback and the server for one service. GUI thread."""

    def __init__(self, service: Service, *, host: str = "127.0.0.1", port: int = 8421,
                 max_documents: int = 32, max_tokens: int | None = None,
                 max_queue: int | None = None, settings=None,
                 geometry: tuple[int, int] | None = None) -> None:
        """`settings`: a QSettings the window saves its layout to and restores it from
        (None: neither); `geometry`: a size that overrides the saved one (--size)."""
        from app.prompt_context import context_source
        from inspector.playback import Playback
        from inspector.tracks import LiveFeed, TrackStore
        from widgets.main_window import MainWindow

        self.service = service
        self.host, self.port = host, port
        self.max_tokens = max_tokens  # --max-tokens, for the server
        self.max_queue = max_queue  # --upstream-max-inflight with --upstream, for the server
        self.store = TrackStore(max_documents=max_documents)
        self.feed = LiveFeed(service, self.store)
        self.playback = Playback(self.store)
        engine = service.engine
        self.window = MainWindow(self.store, self.playback, [self.feed, self.playback],
                                 submit=service.submit,
                                 title=window_title(engine.name, service.pack),
                                 rerun=self.start_rerun, packs=rerun_packs(),
                                 # Compose's *Guard calls*: greyed out where no guard runs.
                                 guard_calls=service.guard_calls
                                 if getattr(engine, "guards_calls", False) else None,
                                 settings=settings, size=geometry)
        # The Prompt view's tokenizer and render (where the context went; prompt diffs).
        self._exit = contextlib.ExitStack()
        self.window.prompt.set_context_source(
            self._exit.enter_context(context_source(service, self.store)))
        recorder = service.recorder
        self.window.set_recordings(recordings_folder(),
                                   recorder.path if recorder is not None else None)
        self._reruns: list[tuple[RerunFeed, threading.Thread]] = []
        self.window.server_toggled.connect(self._server_toggled)
        self.window.free_port_chosen.connect(self._use_port)
        self.closed = False
        self.server = None
        self.url: str | None = None
        self._server_task: asyncio.Task | None = None
        self._sock: socket.socket | None = None
        self._toggle_task: asyncio.Future | None = None
        from PySide6.QtCore import QTimer

        self._status = QTimer(self.window)
        self._status.timeout.connect(self.update_status)
        self._status.start(500)
        self.update_status()

    def update_status(self) -> None:
        engine = self.service.engine
        state = engine.state
        if engine.load_error:
            state = "failed to load"
        slots = None
        try:
            waiting = engine.queue_depth()
            # Engines with parallel sequences (llama.cpp) say how many serve a request now.
            if hasattr(engine, "busy_slots"):
                slots = (engine.busy_slots(), engine.parallel)
        except Exception:  # a closed engine
            waiting = 0
        self.window.set_engine_status(engine.name, state, waiting, slots)

    # -- the server ------------------------------------------------------------------------

    async def start_server(self) -> str | None:
        """Start uvicorn in this loop; returns the base URL (None, with the reason shown in
        the status bar, when the port cannot be bound)."""
        if self._server_task is not None:
            return self.url
        from app.api.listen import bind
        from app.api.server import make_server

        try:
            # Bind first, as `prism serve` does: a busy port is an OSError here, not uvicorn's
            # sys.exit.
            sock = bind(self.host, self.port)
        except OSError as e:
            busy = self.port
            free = free_port(self.host)
            # The next start (the Server button too) uses the free port: retrying the busy
            # one would only fail again.
            self.port = free
            self.window.set_server(None, f"server off: {self.host}:{busy}: {e.strerror}")
            if free:
                self.window.offer_port(free)
            return None
        host, port = sock.getsockname()[:2]
        state = self.app_state(host, port)
        self.server = make_server(state, host, port, log_level="warning")
        self._sock = sock
        self._server_task = asyncio.ensure_future(self.server.serve(sockets=[sock]))
        while not self.server.started:
            if self._server_task.done():  # failed while starting
                with contextlib.suppress(BaseException):
                    self._server_task.result()
                self._server_task, self.server = None, None
                sock.close()
                self.window.set_server(None, "server off: it failed to start (see the log)")
                return None
            await asyncio.sleep(0.01)
        self.url = f"http://{host}:{port}/v1"
        self.window.set_server(self.url, "Paste into Open WebUI: Settings → Connections → "
                               "OpenAI API, any key")
        return self.url

    def app_state(self, host: str, port: int):
        """What the server's routes read: this window's service and its settings."""
        from app.api.state import AppState, ServerConfig

        return AppState(self.service, ServerConfig(host=host, port=port,
                                                   model_name=self.service.engine.name,
                                                   max_tokens=self.max_tokens,
                                                   **({"max_queue": self.max_queue}
                                                      if self.max_queue else {})))

    async def stop_server(self) -> None:
        task, self._server_task = self._server_task, None
        if task is None:
            return
        self.server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self.server, self.url = None, None
        self.window.set_server(None)

    def _use_port(self, port: int) -> None:
        """The status bar's *Use free port N*: start the server there."""
        self.port = port
        self._server_toggled(True)

    def _server_toggled(self, on: bool) -> None:
        # Kept, so the task is not garbage-collected while it runs.
        self._toggle_task = asyncio.ensure_future(
            self.start_server() if on else self.stop_server())

    # -- reruns ----------------------------------------------------------------------------

    def start_rerun(self, choice: EngineChoice, plan: RerunPlan) -> RerunFeed:
        """Request → Re-run on…: a feed for the window now, the rerun on a thread of its own
        (building the other engine loads a model or asks a server)."""
        from inspector.rerun import RerunFeed

        feed = RerunFeed(plan, self.store, choice)
        thread = threading.Thread(target=self._rerun, args=(feed, choice, plan),
                                  name="prism-rerun", daemon=True)
        self._reruns.append((feed, thread))
        thread.start()
        return feed

    def _rerun(self, feed: RerunFeed, choice: EngineChoice, plan: RerunPlan) -> None:
        """The rerun's thread: `prism rerun`'s service and loop. The window's recording
        setting holds for it: a window that records writes each rerun to a file of its own,
        naming what it re-ran."""
        from app import rerun

        try:
            service = rerun.service_for(choice)
        except (SystemExit, Exception) as e:  # a bad path, pack or URL: said in the window
            feed.fail(f"cannot re-run on {choice.describe()}: {e}")
            return
        recorder = None
        try:
            if self.records:
                recorder = service.recorder = rerun.recorder_for(service, None, plan.rerun_of)
            feed.attach(service)
            report = rerun.rerun_requests(
                service, plan.requests, recorder,
                overrides=rerun.Overrides(max_tokens=choice.max_tokens),
                progress=feed.say, before=feed.expect, sent=feed.sent, stopped=feed.stopped)
            where = f", recorded in {report.path}" if report.path else ""
            feed.done(f"re-run of {plan.label} on {service.engine.name}: "
                      f"{report.done}/{report.total} requests, {report.tokens} tokens"
                      + (f", {report.failed} not sent" if report.failed else "")
                      + (" (stopped)" if report.interrupted else "") + where)
        except Exception as e:  # the window must hear of it; the thread ends either way
            log.exception("[prism] the re-run on %s failed", choice.describe())
            feed.fail(f"the re-run on {choice.describe()} failed: {e}")
        finally:
            if recorder is not None:
                recorder.close()
            service.engine.close()

    @property
    def records(self) -> bool:
        """The window records (so a rerun records too)."""
        return self.service.recorder is not None

    # -- life ------------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop everything in order: reruns, the server (no new request), the live feed, the
        engine (its thread and model), then the recorder (its file, complete). Once."""
        if self.closed:
            return
        self.closed = True
        if self.service.recorder is not None:
            # What the stop cuts is recorded as the stop's, not as its clients' cancels.
            self.service.recorder.stopping()
        self._status.stop()
        for feed, _thread in self._reruns:
            feed.cancel()
        for feed, thread in self._reruns:
            thread.join(RERUN_JOIN_S)
            feed.close()
        await self.stop_server()
        self.feed.close()
        self.service.engine.close()
        self._exit.close()
        telemetry.close(self.service)  # the last spans, within a bound
        recorder = self.service.recorder
        if recorder is not None:
            recorder.close()
        log.info("[prism] stopped the server, the engine and the recorder%s",
                 f" ({recorder.path})" if recorder is not None else "")


def free_port(host: str = "127.0.0.1") -> int | None:
    """A port the system says is free now (None when even that fails)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            return s.getsockname()[1]
    except OSError:
        return None


def recordings_folder() -> Path:
    """Where the window records by default, and where File → Open starts."""
    from engine.record.recording import default_session_path

    return default_session_path().parent


def window_settings():
    """The window's saved layout: Qt's per-user settings (on Linux
    $XDG_CONFIG_HOME/Prism/Prism.conf)."""
    from PySide6.QtCore import QSettings

    return QSettings()


def window_size(text: str) -> tuple[int, int]:
    """--size WIDTHxHEIGHT."""
    w, sep, h = text.lower().partition("x")
    try:
        size = (int(w), int(h))
    except ValueError:
        size = (0, 0)
    if not sep or min(size) < 200:
        raise argparse.ArgumentTypeError(f"not a window size: {text!r} (e.g. 1280x800)")
    return size


async def main(inspector: Inspector, args: argparse.Namespace,
               stop: StopRequest | None = None) -> int:
    """Show the window, start the server, open the replays, and wait for a way out: the
    window closed (Quit, Ctrl+Q, the close button), a signal (`stop`), or --quit-after /
    --screenshot. Every way out runs the same clean-up, in order (Inspector.close)."""
    window = inspector.window
    stop = stop or StopRequest()
    closed = asyncio.get_running_loop().create_future()
    window.closed.connect(lambda: closed.done() or closed.set_result(None))
    try:
        if stop.requested:  # a signal while the service was being built
            return 0
        window.show()
        if not args.no_server:
            await inspector.start_server()
        replaying = False
        for path in args.replay or ():
            speed = 1.0 if args.replay_speed is None else args.replay_speed
            inspector.playback.set_speed(speed)
            window.bar.set_speed(speed)
            replaying = window.open_recording(path) or replaying
        started = time.monotonic()
        limit = args.quit_after
        if limit is None and args.screenshot and not replaying:
            limit = 3.0
        while not closed.done() and not stop.requested:
            how = stop.take_hook()
            if how:
                quit_by(window, how)
                continue
            elapsed = time.monotonic() - started
            played = replaying and inspector.playback.finished
            if (limit is not None and elapsed >= limit) or (args.screenshot and played):
                if played and args.screenshot:
                    await asyncio.sleep(SCREENSHOT_SETTLE_S)
                    window.charts.refresh()
                    window.frame()
                if args.screenshot:
                    path = window.save_screenshot(args.screenshot)
                    print(f"prism: screenshot saved to {path}", flush=True)
                break
            await asyncio.wait([closed], timeout=0.05)
    finally:
        window.timer.stop()
        await inspector.close()
        window.close()  # saves the layout, when it was not closed already
        # Deleted now, in order, rather than by the collector at exit (pyqtgraph's scene
        # must go before the interpreter does).
        window.deleteLater()
        await asyncio.sleep(0)
    return 0


def check_qt_bindings() -> str | None:
    """PySide6 6.12.0 on Python 3.11 returns None from every void call without a reference
    (harmless where None is immortal, 3.12+); a window makes millions of such calls and dies
    with "deallocating None". Measured, not guessed from version numbers."""
    from PySide6.QtCore import QObject

    probe = QObject()
    before = sys.getrefcount(None)
    for _ in range(50):
        probe.setObjectName("probe")
    if sys.getrefcount(None) < before - 25:
        import PySide6

        return (f"PySide6 {PySide6.__version__} on Python {sys.version.split()[0]} leaks "
                "references to None on every call; the window will crash after a while. "
                "Install 'PySide6-Essentials<6.12' (or use Python 3.12+).")
    return None


def run(args: argparse.Namespace) -> int:
    # First: a signal from here on is a clean stop, even while the model loads.
    stop = StopRequest(getattr(args, "quit_by", None)).install()
    try:
        return _run(args, stop)
    finally:
        stop.uninstall()


def _run(args: argparse.Namespace, stop: StopRequest) -> int:
    import qasync
    from PySide6.QtWidgets import QApplication  # imported before qasync, which picks it up

    from app.config import build_service, uses_catalog
    from widgets.theme import apply_dark_palette

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Prism")
    app.setOrganizationName("Prism")
    # The loop ends when main() has closed everything down, not when Qt's last window goes:
    # Qt quitting first stopped qasync's loop under main() (a traceback and status 1).
    app.setQuitOnLastWindowClosed(False)
    problem = check_qt_bindings()
    if problem:
        log.warning("[prism] %s", problem)
    apply_dark_palette(app)
    # A screenshot is the same picture on every machine: a set size, and the user's saved
    # layout neither read nor changed.
    settings = None if args.screenshot else window_settings()
    geometry = args.size or (SCREENSHOT_SIZE if args.screenshot else None)
    if uses_catalog(args):  # several models: a catalog, loaded on demand
        from app.gui_catalog import CatalogInspector

        inspector = CatalogInspector.from_args(args, settings=settings, geometry=geometry)
    else:
        service = build_service(args)
        if stop.requested:  # asked to stop while the service was built: nothing else starts
            service.engine.close()
            if service.recorder is not None:
                service.recorder.close()
            return 0
        telemetry.start(args, service)  # --otlp-endpoint: one span per request
        # Loopback only: the window has no API key option (`prism serve` is for anything
        # else).
        inspector = Inspector(service, port=args.port, max_tokens=args.max_tokens,
                              max_queue=args.upstream_max_inflight if args.upstream else None,
                              settings=settings, geometry=geometry)
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    try:
        with loop:
            return loop.run_until_complete(main(inspector, args, stop))
    finally:
        asyncio.set_event_loop(None)
