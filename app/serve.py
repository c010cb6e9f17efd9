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
`Server.serve()`, which stops on Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import sys

from app.api.guard import api_key_arg, positive_int
from app.config import add_engine_arguments, build_service, port_number

REASONING_FIELDS = ("reasoning_content", "reasoning", "both")


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


def run(args: argparse.Namespace) -> int:
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
    try:
        service = build_service(args)
    except BaseException:
        sock.close()
        raise
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
    try:
        asyncio.run(make_server(state, args.host, port, log_level=args.log_level)
                    .serve(sockets=[sock]))
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
        service.engine.close()
        if service.recorder is not None:
            service.recorder.close()
    return 0
