"""Upstream benchmark: what Prism in front of a server costs. Prints figures; not a test.

    python bench/upstream.py [--runs 7] [--max-tokens 64] [--threads 1]

The upstream is llama-cpp-python's own server (`python -m llama_cpp.server`, its server extras
are dev dependencies) on the default model, one thread, on a free loopback port. Three ways to
the same streamed chat (the same messages, greedy, `max_tokens`), alternating every round
(rotating who goes first) after one warm-up each:

  D  direct: `POST /v1/chat/completions` on llama_cpp.server itself;
  R  raw mode: Prism (`--upstream`, pack smollm2) renders, streams the upstream's
     `/v1/completions` and parses; chat completions from Prism;
  T  `--tap`: Prism forwards the chat request unchanged and re-reads the answer.

Per request, with httpx (the same client cost for all three): time to first content text,
decode tokens/s ((n - 1) / (last - first) over the content deltas). Medians and the
differences against D are printed. Prism runs in this process (its server on a thread).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.api.server import ServerThread
from app.api.state import AppState
from app.api.tap import TapEngine
from engine.backends.upstream.engine import UpstreamEngine
from engine.chat.packs import load_pack, resolve_pack
from engine.metrics import Metrics
from engine.service import Service
from tests.app.test_upstream_llama_cpp import LlamaCppServer


def stream(url: str, body: dict) -> tuple[float, float, int]:
    """(ttft_s, tokens_per_s, n) for one streamed chat completion."""
    t0 = time.perf_counter()
    stamps: list[float] = []
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=300) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data: {"):
                continue
            for choice in json.loads(line[6:]).get("choices") or ():
                if (choice.get("delta") or {}).get("content"):
                    stamps.append(time.perf_counter())
    if not stamps:
        raise RuntimeError(f"no content from {url}")
    span = stamps[-1] - stamps[0]
    return stamps[0] - t0, (len(stamps) - 1) / span if span > 0 else 0.0, len(stamps)


def prism(engine, pack) -> ServerThread:
    service = Service(engine, pack, metrics=Metrics(engine))
    return ServerThread(AppState(service=service)).start()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    gguf = load_pack("smollm2").gguf
    log = Path(tempfile.mkdtemp()) / "llama_cpp_server.log"
    # Prism probes an idle upstream every few seconds; by default llama_cpp.server interrupts
    # a running completion (here: D's) on any other request, so that is turned off, as the
    # README says to.
    upstream = LlamaCppServer(gguf, log, "--n_threads", str(args.threads),
                              "--interrupt_requests", "False")
    raw_engine = UpstreamEngine(upstream.url)
    tap_engine = TapEngine(UpstreamEngine(upstream.url))
    raw_engine.ready.wait(10)
    tap_engine.ready.wait(10)
    pack = resolve_pack("smollm2", require_model=False)
    servers = {"R": prism(raw_engine, pack), "T": prism(tap_engine, pack)}
    urls = {"D": upstream.url.removesuffix("/v1"), **{k: s.url for k, s in servers.items()}}
    results: dict[str, list[tuple[float, float, int]]] = {k: [] for k in urls}
    try:
        for rnd in range(args.runs + 1):
            order = list(urls)[rnd % 3:] + list(urls)[:rnd % 3]
            for key in order:
                body = {"model": "m", "stream": True, "temperature": 0, "seed": 1,
                        "max_tokens": args.max_tokens,
                        "messages": [{"role": "user",
                                      "content": f"Round {rnd}: tell me about the sea."}]}
                got = stream(urls[key], body)
                if rnd:  # round 0 warms each up
                    results[key].append(got)
    finally:
        for s in servers.values():
            s.stop()
        raw_engine.close()
        tap_engine.close()
        upstream.stop()

    def med(key: str, i: int) -> float:
        return statistics.median(r[i] for r in results[key])

    print(f"upstream: llama_cpp.server, SmolLM2-135M Q4_1, {args.threads} thread; "
          f"{args.runs} rounds, max_tokens {args.max_tokens}, medians")
    names = {"D": "direct to the upstream", "R": "Prism --upstream (raw)",
             "T": "Prism --upstream --tap"}
    for key, name in names.items():
        ttft, tps, n = med(key, 0) * 1000, med(key, 1), med(key, 2)
        line = f"  {key}  {name:24} TTFT {ttft:7.1f} ms   {tps:6.1f} tok/s   {n:.0f} tokens"
        if key != "D":
            line += (f"   TTFT {ttft - med('D', 0) * 1000:+.1f} ms, "
                     f"tok/s x{tps / med('D', 1):.3f}")
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
