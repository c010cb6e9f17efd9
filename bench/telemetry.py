"""What `--otlp-endpoint` costs a request: the median (and 90th percentile) time of one
non-streamed chat completion against `prism serve --replay` (instant replay, so the figure is
the server's own work), with the export off and with the collector up, slow (answers each
export after `--slow-s`), stalled (accepts and never answers) and down (nothing listens). The
collector is a loopback OTLP/HTTP receiver in this process; the spans go out with the SDK's
default batching (one export every 5 s), and the process is a real `prism serve`. A figure to
read, not a test (tests/app/test_telemetry.py checks that no arm fails or holds a request).

    python bench/telemetry.py [--requests 300] [--content] [--slow-s 2]

Runs on the main thread; each collector serves on a thread of its own.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench.common import ROOT, free_port, wait_http

REPLY = ("Let me think about it step by step.\n</think>\n\n"
         + "The answer is four, since two and two make four. " * 8)


def collector(delay: float) -> tuple[ThreadingHTTPServer, str]:
    """An OTLP/HTTP receiver that answers 200 (an empty ExportTraceServiceResponse) after
    `delay` seconds."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            time.sleep(delay)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def stalled() -> tuple[socket.socket, str]:
    """Accepts every connection, never reads or answers."""
    sock = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(sock.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


def measure(replay: Path, n: int, otlp: list[str]) -> list[float]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--replay", str(replay), "--port", str(port),
         "--no-record", "--log-level", "warning", *otlp],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    times: list[float] = []
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc)
        body = {"model": "m", "max_tokens": 200,
                "messages": [{"role": "user", "content": "What is 2+2?"}]}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as http:
            for i in range(n + 20):  # the first 20 warm the process up
                t0 = time.perf_counter()
                r = http.post("/v1/chat/completions", json=body)
                dt = time.perf_counter() - t0
                r.raise_for_status()
                if i >= 20:
                    times.append(dt * 1000)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--content", action="store_true", help="export with --otlp-content")
    ap.add_argument("--slow-s", type=float, default=2.0)
    args = ap.parse_args()
    extra = ["--otlp-content"] if args.content else []
    up, up_url = collector(0.0)
    slow, slow_url = collector(args.slow_s)
    stuck, stuck_url = stalled()
    down_url = f"http://127.0.0.1:{free_port()}"
    arms = [("off", []), ("collector up", ["--otlp-endpoint", up_url, *extra]),
            (f"collector slow ({args.slow_s:g} s)", ["--otlp-endpoint", slow_url, *extra]),
            ("collector stalled", ["--otlp-endpoint", stuck_url, *extra]),
            ("collector down", ["--otlp-endpoint", down_url, *extra])]
    with tempfile.TemporaryDirectory() as tmp:
        replay = Path(tmp) / "reply.txt"
        replay.write_text(REPLY, encoding="utf-8")
        rows = [(name, measure(replay, args.requests, otlp)) for name, otlp in arms]
    up.shutdown()
    slow.shutdown()
    stuck.close()
    base = statistics.median(rows[0][1])
    print(f"per request, {args.requests} non-streamed requests against prism serve --replay"
          f"{' (with --otlp-content)' if args.content else ''}:")
    print(f"{'export':<24}{'median ms':>10}{'p90 ms':>10}{'vs off':>10}")
    for name, times in rows:
        med = statistics.median(times)
        p90 = statistics.quantiles(times, n=10)[-1]
        print(f"{name:<24}{med:>10.2f}{p90:>10.2f}{med - base:>+10.2f}")


if __name__ == "__main__":
    main()
