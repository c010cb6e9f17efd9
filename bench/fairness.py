"""A short request beside a long prefill: does it keep its pace, and what does the prefill pay?
(issue 24, item 5: opencode's title request decoded at 0.5 tokens/s beside its 7.4k-token
prompt.) Prints medians; not part of the test suite.

Each engine is a fresh `LlamaEngine(parallel=2)` on the default model (split caches, as
`prism serve` picks for it; no disk cache), greedy. Per chunking variant, one measurement is,
all on that variant's one engine (one process, the same load, a sizer that has timed steps):

- *short alone*: a short prompt that generates `--short-tokens` tokens: its decode tokens/s
  after its first token;
- *long alone*: a prompt of about `--long-tokens` tokens, one token out: its prefill time
  (`Timings.prompt_ms`) and the process's CPU time meanwhile;
- *beside*: the short request again, and once it has its first token a second long prompt
  (the same length, another first sentence, so it finds nothing of the first in a slot): the
  short request's tokens/s while the long one is in prefill, and the long one's prefill time
  and CPU time. Whether *long alone* runs before or after *beside* alternates by round.

Variants (the chunk a step may carry beside a generating sequence; engine/backends/llama/chunks.py):
`fixed-256` (the chunk before issue 24), `fixed-N` (`--fixed`), `alternate` (256 tokens every
other step, none between), `timed-F` (the sizer: the generating row at most F times slower
than alone; `--fair`, default `FAIR_STEP`). Every round measures every variant, in an order
rotated each round, and each measurement is compared with its own lone runs (medians of the
ratios over rounds). What the prefill pays beside a short request is at least that request's
own time at its slower pace; a fresh engine per lone run (the first version of this bench)
swung the lone prefill by ±10% between processes, more than what was measured.

    python bench/fairness.py [--rounds 4] [--long-tokens 4200] [--short-tokens 32] [--threads N]
                             [--fixed 16 ...] [--fair 1.5 ...] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.backends.base import Finish, Job, Token
from engine.backends.llama.batch import PREFILL_CHUNK
from engine.backends.llama.chunks import FAIR_STEP, ChunkSizer
from engine.backends.llama.engine import LlamaEngine
from engine.chat.packs import resolve_pack
from engine.chat.request import Sampling

GREEDY = Sampling(temperature=0.0)


def chatml(user: str) -> str:
    return f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


class Alternate(ChunkSizer):
    """A full chunk on every other step beside generating rows, none on the steps between."""

    def __init__(self, max_chunk: int) -> None:
        super().__init__(max_chunk, fair=None)
        self._odd = False

    def cap(self) -> int:
        self._odd = not self._odd
        return self.max_chunk if self._odd else 0


class Watch(ChunkSizer):
    """Wraps a sizer to record the chunk sizes it gave while a sequence generated."""

    def __init__(self, inner: ChunkSizer) -> None:
        super().__init__(inner.max_chunk)
        self.inner, self.caps = inner, []

    def cap(self) -> int:
        k = self.inner.cap()
        self.caps.append((time.perf_counter(), k))
        return k

    def observe(self, generating: int, chunk: int, seconds: float) -> None:
        self.inner.observe(generating, chunk, seconds)



def variants(fixed: list[int], fairs: list[float]) -> dict[str, Callable[[], ChunkSizer]]:
    out: dict[str, Callable[[], ChunkSizer]] = {
        f"fixed-{PREFILL_CHUNK}": lambda: ChunkSizer(PREFILL_CHUNK, fair=None)}
    for k in fixed:
        out[f"fixed-{k}"] = lambda k=k: ChunkSizer(k, fair=None)
    out["alternate"] = lambda: Alternate(PREFILL_CHUNK)
    for f in fairs:
        out[f"timed-{f:g}"] = lambda f=f: ChunkSizer(PREFILL_CHUNK, fair=f)
    return out


class Collector:
    def __init__(self, prompt: str, max_tokens: int) -> None:
        self.tokens: list[Token] = []
        self.done = threading.Event()
        self.finish: Finish | None = None
        self.job = Job(prompt=prompt, max_tokens=max_tokens, sampling=GREEDY,
                       on_token=self.tokens.append, on_finish=self._end,
                       submitted_at=time.perf_counter())

    def _end(self, fin: Finish) -> None:
        self.finish = fin
        self.done.set()

    def wait(self) -> Finish:
        if not self.done.wait(600):
            raise SystemExit("a request did not finish in 600 s")
        assert self.finish is not None
        if self.finish.reason not in ("stop", "length"):
            raise SystemExit(f"a request ended {self.finish.reason}: {self.finish.error}")
        return self.finish


def rate(tokens: list[Token], since: float = 0.0) -> float:
    """Tokens/s over the tokens decoded after `since` (the first of them starts the clock)."""
    ts = [t.t for t in tokens if t.t >= since]
    return (len(ts) - 1) / (ts[-1] - ts[0]) if len(ts) > 1 and ts[-1] > ts[0] else float("nan")


def engine(path: Path, threads: int | None, sizer: ChunkSizer | None = None) -> LlamaEngine:
    eng = LlamaEngine(path, n_ctx=8192, parallel=2, n_threads=threads, kv_unified=False)
    if not eng.ready.wait(120) or eng.load_error:
        raise SystemExit(f"the model did not load: {eng.load_error}")
    if sizer is not None:
        eng._batcher.sizer = sizer  # before any job: the worker reads it at its next step
    return eng


def short_run(eng: LlamaEngine, short: str, n: int) -> float:
    s = Collector(short, n)
    eng.submit(s.job)
    s.wait()
    return rate(s.tokens)


def beside(path: Path, threads: int | None, short: str, n: int, longs: tuple[str, str],
           sizer: ChunkSizer, long_first: bool) -> dict[str, float]:
    """On one engine (so every figure sees the same process and load, and the sizer has timed
    a few steps, as a server's has): the short request alone; one long prompt read alone; and
    the short request again with the other long prompt read beside it. The two long prompts
    differ from their first sentence, so neither finds the other in a slot; which of the two
    long reads comes first alternates by round (`long_first`)."""
    watch = Watch(sizer)
    eng = engine(path, threads, watch)
    try:
        alone = short_run(eng, short, n)

        def long_alone() -> tuple[float, float]:
            job = Collector(longs[0], 1)
            cpu = time.process_time()
            eng.submit(job.job)
            fin = job.wait()
            return fin.timings.prompt_ms, time.process_time() - cpu

        if long_first:
            alone_ms, alone_cpu = long_alone()
        s = Collector(short, n)
        eng.submit(s.job)
        while not s.tokens and not s.done.is_set():
            time.sleep(0.001)
        lo = Collector(longs[1], 1)
        cpu = time.process_time()
        t_long = time.perf_counter()
        eng.submit(lo.job)
        fin = lo.wait()
        cpu = time.process_time() - cpu
        s.wait()
        if not long_first:
            alone_ms, alone_cpu = long_alone()
        t_end = t_long + fin.timings.queue_ms / 1000 + fin.timings.prompt_ms / 1000
        during = [t for t in s.tokens if t_long <= t.t <= t_end]
        caps = [k for t, k in watch.caps if t_long <= t <= t_end]
        chunks = [k for k in caps if k > 0]
        return {"short_alone": alone, "short_beside": rate(during), "tokens": len(during),
                "prefill_ms": fin.timings.prompt_ms, "prefill_cpu": cpu,
                "alone_ms": alone_ms, "alone_cpu": alone_cpu,
                "chunk": statistics.median(chunks) if chunks else float("nan"),
                "steps": len(chunks) / len(caps) if caps else float("nan")}
    finally:
        eng.close()


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--long-tokens", type=int, default=4200,
                    help="the long prompt's length, about (default 4200)")
    ap.add_argument("--short-tokens", type=int, default=32,
                    help="tokens the short request generates (default 32)")
    ap.add_argument("--fixed", type=int, nargs="*", default=[],
                    help="fixed chunk sizes to compare beside the old 256 (default none)")
    ap.add_argument("--fair", type=float, nargs="*", default=[FAIR_STEP],
                    help=f"the timed sizer's step ratios (default {FAIR_STEP:g})")
    ap.add_argument("--threads", type=int, default=None,
                    help="llama.cpp threads (default: the engine's, as prism serve)")
    ap.add_argument("--quick", action="store_true",
                    help="one round, a 2,000-token prompt, the old chunk and the default only")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.long_tokens, args.fixed, args.fair = 1, 2000, [], [FAIR_STEP]
    path = resolve_pack("smollm2").gguf
    assert path is not None
    short = chatml("Count from 1 to 200, separated by commas.")
    # ~11 tokens a sentence; the numbers make the prompt's text unlike the short one's
    sentences = max(1, args.long_tokens // 11)
    longs = tuple(chatml(f"Summarise these notes, {who}. " + " ".join(
        f"Note {i}: the shipment left the depot on time." for i in range(sentences)))
        for who in ("Alice", "Bob"))
    runs = variants(args.fixed, args.fair)
    got: dict[str, list] = {name: [] for name in runs}
    print(f"load {load()}; long prompt {len(engine_tokens(path, longs[0]))} tokens, short "
          f"{args.short_tokens} out; threads {args.threads or 'default'}; "
          f"{args.rounds} round(s)", flush=True)
    names = list(runs)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            got[name].append(beside(path, args.threads, short, args.short_tokens, longs,
                                    runs[name](), long_first=r % 2 == 0))
        print(f"round {r + 1} done (load {load()})", flush=True)
    med = statistics.median
    print(f"{'variant':<12} {'short alone':>11} {'beside':>7} {'slower':>7} {'prefill ms':>10} "
          f"{'alone ms':>9} {'slower':>7} {'cpu':>7} {'chunk':>6} {'steps':>6} {'tokens':>6}")
    for name, rows in got.items():
        def m(key: str, rows: list[dict] = rows) -> float:
            return med(row[key] for row in rows)

        # Each measurement against its own references, just before it; medians over rounds.
        short_x = med(row["short_alone"] / row["short_beside"] for row in rows)
        long_x = med(row["prefill_ms"] / row["alone_ms"] - 1 for row in rows)
        cpu_x = med(row["prefill_cpu"] / row["alone_cpu"] - 1 for row in rows)
        print(f"{name:<12} {m('short_alone'):>11.1f} {m('short_beside'):>7.1f} {short_x:>6.2f}x"
              f" {m('prefill_ms'):>10.0f} {m('alone_ms'):>9.0f} {long_x:>+7.1%} {cpu_x:>+7.1%}"
              f" {m('chunk'):>6.0f} {m('steps'):>6.0%} {m('tokens'):>6.0f}")
    print("slower: the median of each round's ratio (prefill: wall time; cpu: the process's CPU "
          "time while the long prompt was read, what it costs on an idle machine); chunk: the "
          "median chunk while the long prompt was read beside the short request; steps: the "
          "share of its steps that carried one; tokens: the short request's tokens in that "
          "time")


def engine_tokens(path: Path, text: str) -> list[int]:
    eng = engine(path, 1)
    try:
        return eng.tokenize(text)
    finally:
        eng.close()


if __name__ == "__main__":
    main()
