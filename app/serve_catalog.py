"""`prism serve` with several models: the catalog (app/catalog.py) behind the same server.

Owns `serve_catalog(args, sock)`, what `app.serve.run` hands over to when `--models-dir`,
`--models-preset` or several `--model` are given: the same bound socket, the same stop
signals and exit codes, the same routes (app/api/models.py finds each request's model), and
at the end every resident model's engine closed (the disk cache's pending saves written) and
the one recording closed. Runs on the main thread, as `app.serve.run`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import sys
from typing import TYPE_CHECKING

from app import telemetry
from app.catalog import build_catalog

if TYPE_CHECKING:
    from app.serve import StopSignals


def serve_catalog(args: argparse.Namespace, sock: socket.socket, stop: StopSignals) -> int:
    """Serve the catalog until a stop signal (`stop`, installed by `app.serve.run` before
    anything was built: one that came while the catalog was built stops it at once)."""
    from app.api.server import make_server
    from app.api.state import AppState, ServerConfig
    from app.serve import _Server

    port = sock.getsockname()[1]
    try:
        catalog, recorder = build_catalog(args)
    except BaseException:
        sock.close()
        raise
    if stop.received:
        sock.close()
        catalog.close()
        telemetry.close(catalog)
        if recorder is not None:
            recorder.close()
        return 0
    config = ServerConfig(
        host=args.host, port=port, api_key=args.api_key or None,
        allowed_hosts=tuple(args.allow_host), cors_origins=tuple(args.cors_origin),
        reasoning_field=args.reasoning_field, max_queue=args.max_queue,
        max_tokens=args.max_tokens, load_timeout=args.load_timeout,
    )
    state = AppState(service=None, config=config, catalog=catalog)
    logging.getLogger("prism").setLevel(args.log_level.upper())
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"prism: serving {len(catalog.ids)} models ({', '.join(catalog.ids)}) on "
          f"http://{shown}:{port}/v1", file=sys.stderr, flush=True)
    server = _Server(make_server(state, args.host, port, log_level=args.log_level).config)
    stop.server, stop.recorder = server, recorder
    try:
        asyncio.run(server.serve(sockets=[sock]))
    finally:
        stop.closing = True
        print(f"prism: {stop.failed or stop.describe()}: closing the models and the "
              "recording", file=sys.stderr, flush=True)
        sock.close()
        try:
            catalog.close()
            telemetry.close(catalog)  # the last spans, within a bound
        finally:
            if recorder is not None:
                recorder.close()
    return 1 if stop.failed else 0
