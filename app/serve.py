"""The `prism serve` verb: the local server alone, no window.

    prism serve [--host 127.0.0.1] [--port 8421] [--pack NAME | --model FILE.gguf |
                --replay FILE... [--replay-tools-only] [--replay-strict-order]]
                [--api-key KEY] [--no-record]
                [--reasoning-field reasoning_content|reasoning|both] [--max-queue N]
                [--n-ctx N] [--max-tokens N] [--log-level LEVEL]

Owns `add_arguments` and `run`. Everything it says goes to stderr: the banner, the context
size, uvicorn's lines and one line per refused request (issue 9, item 2). Binding anything
but a loopback address without an API key is refused before the model loads: the server runs
code-adjacent tools' requests and spends the machine's compute, so it must not be open to a
network by accident. Runs on the main thread: `asyncio.run` around uvicorn's
`Server.serve()`.

Stopping: SIGINT (Ctrl-C), SIGTERM (`kill`, `docker stop`, systemd) and SIGHUP (the terminal
closing) all stop it the same way, and a requested stop exits 0. uvicorn's own handlers are not
used: from 0.29 it raises the captured signal again once it has shut down, and a SIGTERM raised
with its default action kills the process before the `finally` that writes the disk cache's
pending saves and closes the recording (a reply's entry was lost, a `*.kv.tmp-*` left behind).
`StopSignals` takes the three for the whole run: the first tells the server to stop (and the
recorder that cancels from now on are the stop's, not their clients'), a second SIGINT stops
waiting for open connections, and any signal during the cleanup is noted and ignored. The
engine is closed inside the event loop, once uvicorn has stopped: a stream the stop cut still
reports its end to its run there, recorded as a cancel by the shutdown. A worker thread that
dies of an uncaught exception is logged by `thread_died`; if it was the engine's, nothing can
answer any more, so the server stops and exits 1 after the same cleanup.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

import uvicorn

from app import telemetry
from app.api.guard import api_key_arg, positive_int
from app.config import add_engine_arguments, build_service, port_number, uses_catalog

REASONING_FIELDS = ("reasoning_content", "reasoning", "both")
# SIGHUP does not exist on Windows; SIGBREAK (Ctrl-Break) exists only there.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK")
                     if hasattr(signal, name))

log = logging.getLogger("prism")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; others need --api-key)")
    p.add_argument("--port", type=port_number, default=8421,
                   help="port (default 8421; 0 picks a free one)")
    p.add_argument("--api-key", default=os.environ.get("PRISM_API_KEY"), type=api_key_arg,
                   help="require this key (Authorization: Bearer KEY or x-api-key: KEY); "
                   "default: $PRISM_API_KEY")
    p.add_argument("--reasoning-field", choices=REASONING_FIELDS, default="reasoning_content",
                   help="where OpenAI chat replies put the thinking (default reasoning_content)")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="also answer requests whose Host header names NAME (repeatable; "
                   "default: only the bound address, localhost, 127.0.0.1 and [::1])")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="let web pages from ORIGIN (e.g. http://localhost:3000) call the "
                   "server from a browser (repeatable; default: none)")
    p.add_argument("--max-queue", type=positive_int, default=16,
                   help="waiting requests before new ones get 429 (default 16)")
    p.add_argument("--model-name", default="",
                   help="the model id /v1/models reports (default: the pack's name)")
    p.add_argument("--log-level", default="info",
                   choices=("critical", "error", "warning", "info", "debug"))
    add_engine_arguments(p)


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it could resolve to anything


def check_host(host: str, api_key: str | None) -> None:
    if not is_loopback(host) and not api_key:
        raise SystemExit(
            f"prism serve: refusing to listen on {host} without --api-key. Any machine that "
            "can reach that address could use the model (and read what it is given). Pass "
            "--api-key KEY (or set PRISM_API_KEY), or bind 127.0.0.1."
        )


class _Server(uvicorn.Server):
    """uvicorn's server without its signal handling: `StopSignals` stops it instead."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class StopSignals:
    """The stop requests of one `prism serve`: its signal handlers (main thread only; they set
    flags and take no lock, since they interrupt whatever the main thread holds) and a dying
    engine thread (`thread_died`, on that thread)."""

    def __init__(self, server: uvicorn.Server | None = None, recorder=None) -> None:
        # None until the service is built: a signal before then is noted, and `run` stops
        # once the build returns, before serving anything.
        self.server = server
        self.recorder = recorder
        self.received: list[int] = []  # the signals, in order
        self.failed = ""  # why the server stopped on its own ("" when asked to)
        self.closing = False  # the cleanup has begun: signals are noted, nothing more

    def __call__(self, sig: int, frame: FrameType | None) -> None:
        self.received.append(sig)
        if self.closing:
            return
        if self.recorder is not None:
            self.recorder.stopping()
        if self.server is None:
            return
        if self.server.should_exit and sig == signal.SIGINT:
            self.server.force_exit = True  # a second Ctrl-C: stop waiting for connections
        self.server.should_exit = True

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Handle the stop signals until the block ends (the cleanup included)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        old = {sig: signal.signal(sig, self) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)

    def thread_died(self, args: threading.ExceptHookArgs, engine) -> None:
        """threading.excepthook: log the error; if the engine's worker is what died (the engine
        is closed and nobody asked), stop the server: every request would wait forever."""
        name = args.thread.name if args.thread is not None else "?"
        if args.exc_type is SystemExit:
            return
        log.error("[prism] thread %s stopped on an uncaught error", name,
                  exc_info=(args.exc_type, args.exc_value, args.exc_traceback))
        if (getattr(engine, "state", None) == "closed" and self.server is not None
                and not self.server.should_exit):
            self.failed = f"the engine's thread ({name}) stopped on an error"
            if self.recorder is not None:
                self.recorder.stopping()
            self.server.should_exit = True

    def describe(self) -> str:
        names = ", ".join(signal.Signals(s).name for s in self.received)
        return f"stopping ({names})" if names else "stopping"


async def _serve_then_close(server: uvicorn.Server, sock, service, stop: StopSignals) -> None:
    """Serve until stopped, then close the engine while this loop still runs: the jobs it
    ends (a stream the stop cut) report their last tokens and finish to runs on this loop, and
    on a closed loop that report fails and the job ends as an error instead of a cancel."""
    try:
        await server.serve(sockets=[sock])
    finally:
        stop.closing = True
        print(f"prism: {stop.failed or stop.describe()}: closing the engine and the "
              "recording", file=sys.stderr, flush=True)
        await asyncio.to_thread(service.engine.close)


def run(args: argparse.Namespace) -> int:
    # The stop signals are ours from the start: one that comes while the model loads is a
    # requested stop too (exit 0, nothing served), not a kill with the default action.
    stop = StopSignals()
    with stop.installed():
        return _run(args, stop)


def _run(args: argparse.Namespace, stop: StopSignals) -> int:
    check_host(args.host, args.api_key)
    if args.tap and not args.upstream:
        raise SystemExit("prism serve: --tap forwards to an upstream; give --upstream URL too")
    from app.api.listen import bind
    from app.api.server import make_server
    from app.api.state import AppState, ServerConfig

    # Bind first: a busy port fails before the model loads, and --port 0 learns its port.
    try:
        sock = bind(args.host, args.port)
    except OSError as e:
        raise SystemExit(f"prism serve: cannot listen on {args.host}:{args.port}: "
                         f"{e.strerror or e}") from None
    port = sock.getsockname()[1]
    if uses_catalog(args):  # several models, loaded on demand: app/serve_catalog.py
        from app.serve_catalog import serve_catalog

        return serve_catalog(args, sock, stop)
    try:
        service = build_service(args)
    except BaseException:
        sock.close()
        raise
    if stop.received:  # asked to stop while the model was being set up
        print(f"prism: {stop.describe()} before serving", file=sys.stderr, flush=True)
        sock.close()
        service.engine.close()
        if service.recorder is not None:
            service.recorder.close()
        return 0
    telemetry.start(args, service)  # --otlp-endpoint: one span per request
    config = ServerConfig(
        host=args.host,
        port=port,
        api_key=args.api_key or None,
        allowed_hosts=tuple(args.allow_host),
        cors_origins=tuple(args.cors_origin),
        reasoning_field=args.reasoning_field,
        # --upstream: nothing waits here; the limit is on requests in flight at the upstream.
        max_queue=args.upstream_max_inflight if args.upstream else args.max_queue,
        model_name=args.model_name or (service.engine.name if args.upstream else ""),
        max_tokens=args.max_tokens,
    )
    state = AppState(service=service, config=config)
    # --log-level debug also shows llama.cpp's own lines (logger "prism.llama").
    logging.getLogger("prism").setLevel(args.log_level.upper())
    # The banner, uvicorn's lines and every error's reason all go to stderr (issue 9, item 2).
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"prism: serving {service.engine.name} ({service.pack.name}) on "
          f"http://{shown}:{port}/v1", file=sys.stderr, flush=True)
    server = _Server(make_server(state, args.host, port, log_level=args.log_level).config)
    stop.server, stop.recorder = server, service.recorder
    old_hook, threading.excepthook = (threading.excepthook,
                                      lambda a: stop.thread_died(a, service.engine))
    try:
        asyncio.run(_serve_then_close(server, sock, service, stop))
    finally:
        # Every way out comes here (a signal, the engine dying, an error in the server):
        # the pending cache saves are written and the recording closed before the exit.
        stop.closing = True
        sock.close()
        try:
            service.engine.close()  # closed already, unless the loop itself failed
        finally:
            if service.recorder is not None:
                service.recorder.close()
            telemetry.close(service)  # the last spans, within a bound
            threading.excepthook = old_hook
    if stop.failed:
        print(f"prism serve: {stop.failed}", file=sys.stderr, flush=True)
        return 1
    return 0
