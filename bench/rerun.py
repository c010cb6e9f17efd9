"""Rerun benchmark: what `prism rerun` costs over serving the same requests. Prints figures; not
a test.

    python bench/rerun.py [--rounds 5] [--requests 6] [--max-tokens 64] [--threads 1]

The default model, one sequence, one engine for both ways. First an original recording of
`--requests` chats (seeded, so every round generates the same tokens). Then, alternating each
round (rotating who goes first), after one warm-up each:

  D  direct: the same ChatRequests submitted to the service one after the other, recorded, as
     the server does for a client that sends them in turn;
  R  rerun: `rerun_session` (app/rerun.py) over the recording: it reads each request record,
     rebuilds its ChatRequest, submits it, names its counterpart in the new recording.

Per round: output tokens / wall seconds over all the requests. Medians and R against D are
printed (the issue's budget: R within 2% of D).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.rerun import rebuild, rerun_session
from engine.backends.llama.engine import LlamaEngine
from engine.chat.packs import load_pack
from engine.chat.request import ChatRequest, Message, Sampling
from engine.metrics import Metrics
from engine.record.reader import read_session
from engine.record.recording import Recorder
from engine.service import Service

ASKS = ("Write a short poem about rain.", "Explain what a compiler does.",
        "List five fruits and their colours.", "Describe the moon to a child.",
        "Give three tips for learning to cook.", "What makes a good story?")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    pack = load_pack("smollm2")
    engine = LlamaEngine(pack.gguf, n_ctx=2048, n_threads=args.threads, parallel=1)
    folder = Path(tempfile.mkdtemp(prefix="prism-bench-rerun-"))
    original = folder / "original.jsonl"
    asks = [ASKS[k % len(ASKS)] for k in range(args.requests)]
    with Recorder(original, model=engine.name, pack=pack.name) as rec:
        service = Service(engine, pack, metrics=Metrics(engine), recorder=rec)
        for k, ask in enumerate(asks):
            service.submit(ChatRequest(messages=(Message("user", ask),),
                                       max_tokens=args.max_tokens,
                                       sampling=Sampling(seed=k))).wait()
    session = read_session(original)
    requests = [rebuild(r) for r in session.requests]

    def direct(n: int) -> tuple[int, float]:
        with Recorder(folder / f"d{n}.jsonl", model=engine.name, pack=pack.name) as rec:
            service = Service(engine, pack, metrics=Metrics(engine), recorder=rec)
            t0, tokens = time.perf_counter(), 0
            for req in requests:
                run = service.submit(req)
                run.wait()
                tokens += len(run.tokens)
            return tokens, time.perf_counter() - t0

    def rerun(n: int) -> tuple[int, float]:
        with Recorder(folder / f"r{n}.jsonl", model=engine.name, pack=pack.name,
                      rerun_of=str(original)) as rec:
            service = Service(engine, pack, metrics=Metrics(engine), recorder=rec)
            t0 = time.perf_counter()
            report = rerun_session(service, session, rec)
            return report.tokens, time.perf_counter() - t0

    ways = {"D": direct, "R": rerun}
    rates: dict[str, list[float]] = {k: [] for k in ways}
    for fn in ways.values():
        fn(-1)  # warm-up
    for n in range(args.rounds):
        order = list(ways) if n % 2 == 0 else list(ways)[::-1]
        for name in order:
            tokens, seconds = ways[name](n)
            rates[name].append(tokens / seconds)
    engine.close()
    d, r = statistics.median(rates["D"]), statistics.median(rates["R"])
    print(f"rerun benchmark: {args.requests} requests × {args.max_tokens} max tokens, "
          f"{args.rounds} rounds, {args.threads} thread(s), {engine.name}")
    for name in ways:
        print(f"  {name}: median {statistics.median(rates[name]):.1f} tok/s  "
              f"(rounds: {', '.join(f'{x:.1f}' for x in rates[name])})")
    print(f"  R against D: {100 * (r - d) / d:+.2f}% tokens/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
