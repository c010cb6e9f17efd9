"""Server benchmark: Prism's HTTP server against raw llama-cpp-python and llama-cpp-python's own
server, on the default model. Prints its figures; not part of the test suite.

    python bench/server.py [--runs 5] [--max-tokens 128] [--n-ctx 2048] [--seed 42]
                           [--same-prompt] [--no-service] [--threads 1]
    python bench/server.py --concurrency 1,2,4,8 [--runs 5] [--max-tokens 128] [--threads 1]
                           [--kv-layout auto|split|unified]
                           (parallel sequences: bench/concurrency.py)

Variants, each in its own process so peak memory is its own:
  A  raw `Llama.create_completion(stream=True)` in a worker process (no HTTP);
  B  `prism serve --pack smollm2 --parallel 1` streamed over HTTP with the `openai` SDK (chat
     completions): one stream and one KV cache, like A (the default `--parallel 4` keeps a
     cache per sequence where memory allows: its figures are bench/concurrency.py's);
  C  `python -m llama_cpp.server` on the same GGUF, with the `openai` SDK (completions, so it
     gets exactly the prompt Prism renders). It needs llama-cpp-python's server extras:
     `pip install sse-starlette "starlette-context>=0.3.6,<0.4" pydantic-settings PyYAML`
     (without them C is skipped). Its defaults are kept, `logits_all` among them.
  S  Prism's Service + LlamaEngine in a worker process, no HTTP: splits B's cost into what
     the engine, parser, metrics and recorder take and what HTTP + the SDK add.

Every variant gets the same thread count (`--threads`, default 1, for decoding and for the
prompt): on a small shared machine llama.cpp's multi-threaded prompt batches spin-wait on each
other while other processes hold a core, and time to first token then swings by seconds.
Same rendered prompt (a new one each round, so every variant decodes the prompt again), same
seed, sampling and `max_tokens`; the rounds alternate A, B, C (rotating who goes first) after
one warm-up each. Per request: time to first token (from the call to the first text) and
decode tokens/s ((n - 1) / (last text - first text)); per process: peak RSS (VmHWM from
/proc, Linux). Medians and ratios against A are printed, with issue 4's targets for B:
tokens/s >= 0.98 x A, TTFT <= A + 3 ms, peak memory <= A + 50 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, SAMPLING, free_port, peak_rss_mb, wait_http

QUESTION = ("Write a long, detailed story about a lighthouse keeper who finds an old map "
            "hidden in the wall. Describe the sea, the weather and the town.")


def messages(round_no: int) -> list[dict]:
    return [{"role": "user", "content": f"Story number {round_no}. {QUESTION}"}]


def render(pack, round_no: int) -> str:
    from engine.chat.request import Message

    msgs = tuple(Message(m["role"], m["content"]) for m in messages(round_no))
    return pack.chat_template().render(msgs, add_generation_prompt=True,
                                       enable_thinking=pack.thinking)


# --- A: the worker process ---------------------------------------------------------------------


def worker(mode: str, n_ctx: int, record_to: str, threads: int | None) -> None:
    """Reads one JSON request per line on stdin, answers one JSON line of figures.
    mode "raw": Llama.create_completion; mode "service": Prism's Service + LlamaEngine
    in-process (parser, metrics and recorder included, no HTTP)."""
    from engine.chat.packs import resolve_pack

    pack = resolve_pack("smollm2")
    if mode == "raw":
        from llama_cpp import Llama

        llm = Llama(model_path=str(pack.gguf), n_ctx=n_ctx, n_threads=threads,
                    n_threads_batch=threads, verbose=False)
    else:
        from engine.backends.llama.engine import LlamaEngine
        from engine.chat.request import ChatRequest, Message, Sampling
        from engine.metrics import Metrics
        from engine.parse.events import CONTENT
        from engine.record.recording import Recorder
        from engine.service import Service

        engine = LlamaEngine(pack.gguf, n_ctx=n_ctx, n_threads=threads)
        engine.ready.wait()
        service = Service(engine, pack, metrics=Metrics(engine), recorder=Recorder(record_to))
        sampling = dict(SAMPLING)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        times = []
        t0 = time.perf_counter()
        if mode == "raw":
            for chunk in llm.create_completion(req["prompt"], max_tokens=req["max_tokens"],
                                               seed=req["seed"], stream=True, **SAMPLING):
                if chunk["choices"][0]["text"]:
                    times.append(time.perf_counter())
            n = len(times)
        else:
            msgs = tuple(Message(m["role"], m["content"]) for m in req["messages"])
            run = service.submit(ChatRequest(messages=msgs, max_tokens=req["max_tokens"],
                                             sampling=Sampling(seed=req["seed"], **sampling)))
            for ev in run:
                if ev.kind == CONTENT and ev.text:
                    times.append(time.perf_counter())
            n = run.timings.output_tokens
        print(json.dumps({"t0": t0, "times": times, "n": n}), flush=True)


class VariantA:
    name = "A raw llama-cpp-python"
    mode = "raw"

    def __init__(self, model: str, n_ctx: int, threads: int,
                 record_to: Path | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", self.mode, "--n-ctx", str(n_ctx),
             "--threads", str(threads), "--record-to", str(record_to or os.devnull)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert json.loads(self.proc.stdout.readline())["ready"]

    def run(self, prompt: str, msgs, max_tokens: int, seed: int) -> tuple[float, list[float], int]:
        req = {"prompt": prompt, "messages": msgs, "max_tokens": max_tokens, "seed": seed}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        res = json.loads(self.proc.stdout.readline())
        return res["t0"], res["times"], res["n"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(30)


class VariantS(VariantA):
    name = "S prism service, no HTTP"
    mode = "service"


class VariantB:
    name = "B prism serve (HTTP)"

    def __init__(self, model: str, n_ctx: int, threads: int, record_to: Path) -> None:
        import openai

        port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--pack", "smollm2", "--port", str(port),
             "--n-ctx", str(n_ctx), "--record-to", str(record_to), "--log-level", "warning",
             "--parallel", "1", *(["--threads", str(threads)] if threads else [])],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_http(f"http://127.0.0.1:{port}/health", self.proc)
        self.client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x",
                                    max_retries=0, timeout=300)

    def run(self, prompt: str, msgs, max_tokens: int, seed: int):
        times, n = [], 0
        t0 = time.perf_counter()
        stream = self.client.chat.completions.create(
            model="smollm2", messages=msgs, max_tokens=max_tokens, seed=seed, stream=True,
            stream_options={"include_usage": True}, temperature=SAMPLING["temperature"],
            top_p=SAMPLING["top_p"], extra_body={k: SAMPLING[k] for k in
                                                 ("top_k", "min_p", "repeat_penalty")})
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                times.append(time.perf_counter())
            if chunk.usage:
                n = chunk.usage.completion_tokens
        return t0, times, n

    def close(self) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(30)


class VariantC:
    name = "C llama_cpp.server"

    def __init__(self, model: str, n_ctx: int, threads: int) -> None:
        import openai

        port = free_port()
        t = ["--n_threads", str(threads), "--n_threads_batch", str(threads)] if threads else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", model, "--n_ctx", str(n_ctx),
             "--port", str(port), "--verbose", "false", *t],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_http(f"http://127.0.0.1:{port}/v1/models", self.proc)
        self.client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x",
                                    max_retries=0, timeout=300)

    def run(self, prompt: str, msgs, max_tokens: int, seed: int):
        times = []
        t0 = time.perf_counter()
        stream = self.client.completions.create(
            model="x", prompt=prompt, max_tokens=max_tokens, seed=seed, stream=True,
            temperature=SAMPLING["temperature"], top_p=SAMPLING["top_p"],
            extra_body={k: SAMPLING[k] for k in ("top_k", "min_p", "repeat_penalty")})
        for chunk in stream:
            if chunk.choices and chunk.choices[0].text:
                times.append(time.perf_counter())
        return t0, times, len(times)

    def close(self) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="measured rounds (default 5)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--same-prompt", action="store_true",
                    help="one prompt for every round: the KV cache then holds all of it, so "
                    "TTFT is one token's decode plus each variant's overhead (less noise)")
    ap.add_argument("--no-service", action="store_true",
                    help="skip S (Prism's service in-process, which splits B's cost into "
                    "engine+service and HTTP)")
    ap.add_argument("--threads", type=int, default=1,
                    help="llama.cpp threads in every variant (default 1; 0: library defaults)")
    ap.add_argument("--concurrency", metavar="C,C,...",
                    help="instead: C concurrent clients against prism serve --parallel, with a "
                    "bare low-level decode loop as the ceiling (bench/concurrency.py)")
    ap.add_argument("--kv-layout", choices=("auto", "split", "unified"), default="auto",
                    help="with --concurrency: the servers' KV layout, and the bare loop's")
    ap.add_argument("--worker", choices=("raw", "service"), help=argparse.SUPPRESS)
    ap.add_argument("--record-to", default=os.devnull, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.n_ctx, args.record_to, args.threads or None)
        return 0
    if args.concurrency:
        from bench.concurrency import main as concurrency

        return concurrency(args)

    from engine.chat.packs import resolve_pack

    pack = resolve_pack("smollm2")
    model = str(pack.gguf)
    print(f"model {Path(model).name}, max_tokens {args.max_tokens}, n_ctx {args.n_ctx}, "
          f"seed {args.seed}, {args.runs} rounds, threads {args.threads or 'default'}, "
          f"{os.cpu_count()} CPUs", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="prism-bench-"))
    t = args.threads
    variants = [VariantA(model, args.n_ctx, t), VariantB(model, args.n_ctx, t, tmp / "b.jsonl")]
    if not args.no_service:
        variants.append(VariantS(model, args.n_ctx, t, tmp / "s.jsonl"))
    try:
        import llama_cpp.server.app  # noqa: F401  (its extras are installed)

        variants.append(VariantC(model, args.n_ctx, t))
    except ImportError as e:
        print(f"C skipped: llama_cpp.server needs its extras ({e})")
    results: dict[str, dict[str, list[float]]] = {v.name: {"tps": [], "ttft": [], "n": []}
                                                 for v in variants}
    try:
        for v in variants:  # warm-up: first-call costs out of the figures
            v.run(render(pack, 0), messages(0), 16, args.seed)
        for r in range(1, args.runs + 1):
            order = variants[r % len(variants):] + variants[:r % len(variants)]
            k = 1 if args.same_prompt else r
            prompt, msgs = render(pack, k), messages(k)
            for v in order:
                t0, times, n = v.run(prompt, msgs, args.max_tokens, args.seed)
                n = n or len(times)
                res = results[v.name]
                res["ttft"].append((times[0] - t0) * 1000.0)
                res["tps"].append((n - 1) / (times[-1] - times[0]) if n > 1 else 0.0)
                res["n"].append(n)
            print(f"round {r}: " + "  ".join(
                f"{v.name[0]} {results[v.name]['tps'][-1]:.1f} tok/s "
                f"{results[v.name]['ttft'][-1]:.1f} ms" for v in variants), flush=True)
        rss = {v.name: peak_rss_mb(v.proc.pid) for v in variants}
    finally:
        for v in variants:
            v.close()

    base = variants[0].name
    med = {name: {k: statistics.median(vals) for k, vals in res.items()}
           for name, res in results.items()}
    print()
    print(f"{'variant':26} {'tokens':>6} {'tok/s':>8} {'x A':>6} {'TTFT ms':>9} {'- A':>7} "
          f"{'peak RSS MB':>12} {'- A':>7}")
    for name, m in med.items():
        print(f"{name:26} {m['n']:6.0f} {m['tps']:8.2f} {m['tps'] / med[base]['tps']:6.3f} "
              f"{m['ttft']:9.1f} {m['ttft'] - med[base]['ttft']:+7.1f} {rss[name]:12.1f} "
              f"{rss[name] - rss[base]:+7.1f}")
    b = variants[1].name
    ok = (med[b]["tps"] >= 0.98 * med[base]["tps"], med[b]["ttft"] <= med[base]["ttft"] + 3,
          rss[b] <= rss[base] + 50)
    print(f"\nB targets: tok/s >= 0.98 A: {'met' if ok[0] else 'MISSED'}; "
          f"TTFT <= A + 3 ms: {'met' if ok[1] else 'MISSED'}; "
          f"RSS <= A + 50 MB: {'met' if ok[2] else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
