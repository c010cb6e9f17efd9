"""A subagent beside its agent: time to first token of a request whose long system prompt a
busy slot already holds (split KV caches copy it, engine/backends/llama/batch.py `_borrow`) against
the same request with no slot holding it. Prints medians; not part of the test suite.

Runs on the main thread; the engine decodes on its worker thread. Each round: a fresh
`LlamaEngine(parallel=2, kv_unified=False)`; the "agent" request (system prompt + its question)
generates while the "subagent" (same system prompt, another question) is sent, and, on another
fresh engine, the subagent alone. Greedy, 1 llama thread.

    python bench/prefix_share.py [--rounds 3] [--rules 120]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.backends.base import Job
from engine.backends.llama.engine import LlamaEngine
from engine.chat.packs import resolve_pack
from engine.chat.request import Sampling


def chatml(system: str, user: str) -> str:
    return (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            f"<|im_start|>assistant\n")


def run(path: Path, system: str, beside: bool) -> tuple[float, int, str]:
    """(subagent's TTFT ms, its cached tokens, its text)."""
    eng = LlamaEngine(path, n_ctx=4096, parallel=2, n_threads=1, kv_unified=False)
    eng.ready.wait(120)
    try:
        out: dict = {}
        tokens: list[str] = []
        if beside:
            agent_tokens: list[str] = []
            agent = Job(prompt=chatml(system, "Tell me about topic 3."), max_tokens=400,
                        sampling=Sampling(temperature=0.0),
                        on_token=lambda t: agent_tokens.append(t.text))
            eng.submit(agent)
            while len(agent_tokens) < 2:
                time.sleep(0.005)
        job = Job(prompt=chatml(system, "Tell me about topic 7."), max_tokens=16,
                  sampling=Sampling(temperature=0.0), on_token=lambda t: tokens.append(t.text),
                  on_finish=lambda f: out.setdefault("f", f))
        eng.submit(job)
        while "f" not in out:
            time.sleep(0.005)
        if beside:
            agent.cancel()
        t = out["f"].timings
        return t.ttft_ms, t.cached_tokens, "".join(tokens)
    finally:
        eng.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rules", type=int, default=120,
                    help="system prompt length (120: ~1.8k tokens)")
    args = ap.parse_args()
    path = resolve_pack("smollm2").gguf
    system = " ".join(f"Rule {i}: answer briefly and politely about topic {i}."
                      for i in range(args.rules))
    shared, alone = [], []
    for _ in range(args.rounds):
        shared.append(run(path, system, True))
        alone.append(run(path, system, False))
    med = statistics.median
    print(f"subagent TTFT beside its busy agent: {med(s[0] for s in shared):.0f} ms "
          f"({med(s[1] for s in shared):.0f} prompt tokens reused); alone: "
          f"{med(a[0] for a in alone):.0f} ms ({med(a[1] for a in alone):.0f} reused); "
          f"same text in {sum(s[2] == a[2] for s, a in zip(shared, alone, strict=True))} of "
          f"{args.rounds} rounds")


if __name__ == "__main__":
    main()
