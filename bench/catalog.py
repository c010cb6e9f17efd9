"""Several models behind one server: the time to switch models, and /health while one loads.

Starts `prism serve --models-dir` (a real process on 127.0.0.1) over the default SmolLM2 and
Gemma 3 270M (the `gemma` extra) with `--models-max 1`, so every switch unloads one model and
loads the other, and a fresh disk prompt cache. Each switch is one streamed chat request with
the same long prompt (about 700 tokens); measured from the request to its first token (load +
prefill + one token). Round 1 is cold (nothing on disk); round 2 comes back to each model with
its prefix on disk (the request's `timings` say how many prompt tokens came from the disk
cache). Meanwhile a thread calls GET /health every 20 ms: its latency while models load.

    .venv/bin/python bench/catalog.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.chat.packs import load_pack  # noqa: E402

PROMPT = "Here is a list of fruits: " + ", ".join(f"fruit number {i}" for i in range(120))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_token(http: httpx.Client, model: str) -> tuple[float, dict]:
    t0 = time.perf_counter()
    ttft, timings = None, {}
    with http.stream("POST", "/v1/chat/completions", json={
            "model": model, "stream": True, "max_tokens": 2, "temperature": 0,
            "messages": [{"role": "user", "content": PROMPT}]}) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if ttft is None and chunk.get("choices") and chunk["choices"][0]["delta"].get(
                    "content"):
                ttft = time.perf_counter() - t0
            timings = chunk.get("timings") or timings
    return (ttft if ttft is not None else time.perf_counter() - t0), timings


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    opts = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="prism-catalog-bench-"))
    models = work / "models"
    models.mkdir()
    smol, gemma = load_pack("smollm2").gguf, load_pack("gemma3-270m").gguf
    for f in (smol, gemma):
        os.symlink(f, models / f.name)
    ids = [smol.stem, gemma.stem]
    port = free_port()
    log = (work / "serve.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port), "--models-dir", str(models),
         "--models-max", "1", "--n-ctx", "2048", "--parallel", "1", "--no-record",
         "--cache-dir", str(work / "kv")], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300)
    health: list[float] = []
    done = threading.Event()
    try:
        while True:
            try:
                if http.get("/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)

        def poll() -> None:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as h:
                while not done.is_set():
                    t0 = time.perf_counter()
                    h.get("/health")
                    health.append((time.perf_counter() - t0) * 1000)
                    time.sleep(0.02)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        for rnd in range(opts.rounds):
            label = "cold" if rnd == 0 else "disk cache warm"
            for model in ids:
                s, t = first_token(http, model)
                print(f"round {rnd + 1} ({label}): switch to {model}: first token after "
                      f"{s * 1000:.0f} ms (prompt {t.get('prompt_n', 0) + t.get('cache_n', 0)}"
                      f" tokens, {t.get('cache_n', 0)} cached)", flush=True)
        done.set()
        poller.join(5)
        print(f"/health while switching: {len(health)} calls, median "
              f"{statistics.median(health):.1f} ms, max {max(health):.1f} ms")
    finally:
        done.set()
        proc.terminate()
        proc.wait(30)
        http.close()
        log.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
