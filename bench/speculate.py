"""Speculative decoding's speed-up (engine/backends/llama/speculate.py), Prism against Prism.

Two LlamaEngines on the default model, one with `speculate=True`, the same threads and
context, requests alternating between them for `--rounds` rounds; median decode tokens/s of:

- edit: an agent's edit turn, a ~1,500-token Python file in the prompt and "print the whole
  file with this change", greedy: mostly copied tokens, where n-gram drafts pay;
- story: "write a story about a dragon", greedy: nothing to copy, what drafting must not slow.

Prints one line per workload: tokens/s off and on, the ratio, and the share of draft tokens
kept. Llama.cpp's own server on the same workloads is bench/peers.py. Runs on the main thread.

    python bench/speculate.py [--rounds 5] [--threads 1] [--max-tokens 256]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.backends.base import Finish, Job
from engine.backends.llama.engine import LlamaEngine
from engine.chat.packs import resolve_pack
from engine.chat.request import Sampling


def chatml(user: str) -> str:
    return (f"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")


def edit_file(n_funcs: int = 45) -> str:
    """A deterministic Python file of about 1,500 tokens (SmolLM2's tokenizer)."""
    parts = []
    for i in range(n_funcs):
        parts.append(f"def step_{i}(values, scale={i + 1}):\n"
                     f"    \"\"\"Scale the values by {i + 1} and drop the negative ones.\"\"\"\n"
                     f"    return [v * scale for v in values if v >= {i % 7}]\n")
    return "\n".join(parts)


WORKLOADS = {
    "edit": chatml("Here is a file:\n```python\n" + edit_file() + "```\nRename step_3 to "
                   "prepare and print the whole file with that change."),
    "story": chatml("Write a story about a dragon."),
}


def run(engine: LlamaEngine, prompt: str, max_tokens: int) -> Finish:
    done, out = threading.Event(), []
    job = Job(prompt=prompt, max_tokens=max_tokens, sampling=Sampling(temperature=0.0),
              on_finish=lambda f: (out.append(f), done.set()))
    engine.submit(job)
    done.wait(1800)
    return out[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--n-ctx", type=int, default=4096)
    args = ap.parse_args()
    model = resolve_pack("smollm2").gguf
    engines = {False: LlamaEngine(model, n_ctx=args.n_ctx, n_threads=args.threads),
               True: LlamaEngine(model, n_ctx=args.n_ctx, n_threads=args.threads,
                                 speculate=True)}
    for e in engines.values():
        e.ready.wait(120)
    tps: dict[tuple[str, bool], list[float]] = {}
    kept: dict[str, list[float]] = {}
    for name, prompt in WORKLOADS.items():
        for spec in (False, True):  # warm each slot's cache: the rounds then time decoding
            run(engines[spec], prompt, 8)
        for r in range(args.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            for spec in order:
                fin = run(engines[spec], prompt, args.max_tokens)
                tps.setdefault((name, spec), []).append(fin.timings.tokens_per_s)
                if spec:
                    kept.setdefault(name, []).append(fin.timings.acceptance)
    print(f"decode tokens/s, median of {args.rounds} alternating rounds, {args.threads} "
          f"thread(s), greedy, {args.max_tokens} tokens at most")
    print(f"{'workload':8} {'off':>8} {'ngram':>8} {'ratio':>7} {'kept':>6}")
    for name in WORKLOADS:
        off = statistics.median(tps[(name, False)])
        on = statistics.median(tps[(name, True)])
        print(f"{name:8} {off:8.1f} {on:8.1f} {on / off:7.3f} "
              f"{statistics.median(kept[name]):6.0%}")
    for e in engines.values():
        e.close()


if __name__ == "__main__":
    main()
