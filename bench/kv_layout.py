"""One stream's decode speed by KV layout: `--parallel 1`, `--parallel 4` with llama.cpp's
unified KV pool (Prism's default), and `--parallel 4` with split per-sequence caches.

Runs on the main thread; each engine decodes on its own worker thread. Prints medians of
alternating rounds (greedy, 128 tokens, a new prompt each round, 1 llama thread), so the three
layouts see the same machine load. Not part of the test suite.

    python bench/kv_layout.py [--rounds 6] [--n-ctx 2048]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.backends.base import Job
from engine.backends.llama.engine import LlamaEngine
from engine.chat.packs import resolve_pack
from engine.chat.request import Sampling


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--n-ctx", type=int, default=2048)
    args = ap.parse_args()
    path = resolve_pack("smollm2").gguf
    engines = {
        "parallel 1": LlamaEngine(path, n_ctx=args.n_ctx, parallel=1, n_threads=1),
        "parallel 4, unified KV": LlamaEngine(path, n_ctx=args.n_ctx, parallel=4, n_threads=1),
        "parallel 4, split KV": LlamaEngine(path, n_ctx=args.n_ctx, parallel=4, n_threads=1,
                                            kv_unified=False),
    }
    for e in engines.values():
        e.ready.wait(120)
    rates: dict[str, list[float]] = {k: [] for k in engines}
    for r in range(args.rounds):
        for name, e in engines.items():
            text = f"Story {r}: once upon a time"
            done, out = threading.Event(), {}
            job = Job(prompt=text, prompt_ids=tuple(e.tokenize(text)), max_tokens=128,
                      sampling=Sampling(temperature=0.0))
            job.on_finish = lambda f, out=out, done=done: (out.setdefault("f", f), done.set())
            e.submit(job)
            done.wait(300)
            rates[name].append(out["f"].timings.tokens_per_s)
    base = statistics.median(rates["parallel 1"])
    for name, v in rates.items():
        med = statistics.median(v)
        print(f"{name:24s} {med:6.1f} tokens/s  {med / base:.2f}x")
    for e in engines.values():
        e.close()


if __name__ == "__main__":
    main()
