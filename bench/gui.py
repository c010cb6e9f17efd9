"""GUI benchmark: event-loop stalls while a long replay streams at 2,000 tokens/s, and memory
growth over an hour of simulated traffic. Prints its figures; not part of the test suite.

    QT_QPA_PLATFORM=offscreen python bench/gui.py [--tokens-per-s 2000] [--seconds 15]
                                                  [--hour-requests 600]

Both phases run the real path: `ReplayEngine` (its own thread) → `Service` → `LiveFeed`
(engine thread appends to a deque) → `MainWindow` (offscreen, shown, following the newest
request) drained by its 30 Hz frame timer, inside the qasync loop that `prism` runs.

1. Stalls: a 5 ms precise QTimer records how late each of its ticks comes; the lateness is how
   long the loop was busy (frames, charts, layout) when it wanted to run. p50, p99 and max.
2. Memory: "an hour" of agent traffic — by default 600 requests (one every 6 s) of about 900
   tokens each — played as fast as the engine can, then RSS compared with RSS after the first
   200 requests (when the document cap and the metrics' request log are full), gc collected
   before each reading; RSS is also printed along the way, to show it levels off. (The replay
   engine holds every output's tokens from the start, so the absolute figure is high.)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import qasync
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication

from engine.chat.packs import resolve_pack
from engine.chat.request import ChatRequest, Message
from engine.metrics import Metrics
from engine.record.replay import PLAIN_TOKENS_PER_S, ReplayEngine, split_text
from engine.service import Service

WORDS = ("the model checks the file then compares values before it answers with care about "
         "`inline code` and a few numbers like 42 or 3.14 while thinking step by step").split()
TOOLS = ({"type": "function", "function": {"name": "run", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}}}},)


def output(rng: random.Random, tokens: int) -> str:
    """A realistic agent turn: reasoning, sometimes a call inside it, content, a stray tag."""
    def prose(n: int) -> str:
        words = [rng.choice(WORDS) for _ in range(n)]
        return "\n".join(" ".join(words[i:i + 14]) + "." for i in range(0, n, 14))

    n_reason = int(tokens * 0.6)
    text = prose(n_reason)
    if rng.random() < 0.5:  # the failure Prism exists for: a call inside the thinking
        text += ("\n<tool_call>\n<function=run>\n<parameter=cmd>\nls -la && cat notes.md\n"
                 "</parameter>\n</function>\n</tool_call>\n")
    else:
        text += "\n</think>\n\n"
    text += prose(tokens - n_reason)
    if rng.random() < 0.2:
        text += " </think> " + prose(20)
    return text


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else 0.0


def make_inspector(paths: list[Path], speed: float, max_documents: int):
    from app.gui import Inspector

    engine = ReplayEngine(paths, speed=speed)
    service = Service(engine, resolve_pack("qwen3-xml", require_model=False),
                      metrics=Metrics(engine))
    inspector = Inspector(service, port=0, max_documents=max_documents)
    inspector.window.show()
    return inspector


def request(i: int) -> ChatRequest:
    return ChatRequest(messages=(Message("user", f"task {i}"),), tools=TOOLS, max_tokens=None)


async def wait_all(runs, window, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all(r.done for r in runs) or (window.log.current and
                                            window.log.current.status != "done"):
        if time.monotonic() > deadline:
            raise TimeoutError("the replay did not finish")
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.1)  # one more frame drains the finish


async def stalls(args, tmp: Path) -> None:
    rng = random.Random(1)
    per_request = 2500
    n_requests = max(1, int(args.tokens_per_s * args.seconds / per_request))
    paths = []
    for i in range(n_requests):
        p = tmp / f"long{i}.txt"
        p.write_text(output(rng, per_request), encoding="utf-8")
        paths.append(p)
    total_tokens = sum(len(split_text(p.read_text("utf-8"))) for p in paths)
    speed = args.tokens_per_s / PLAIN_TOKENS_PER_S  # plain text plays 50 tokens/s at 1×
    insp = make_inspector(paths, speed, args.max_documents)
    window = insp.window
    late: list[float] = []
    last = [time.perf_counter()]
    period = 0.005

    def tick() -> None:
        now = time.perf_counter()
        late.append(max(0.0, now - last[0] - period) * 1000.0)
        last[0] = now

    probe = QTimer()
    probe.setTimerType(Qt.TimerType.PreciseTimer)
    probe.timeout.connect(tick)
    await asyncio.sleep(0.3)  # let the window settle
    last[0] = time.perf_counter()
    probe.start(int(period * 1000))
    t0 = time.perf_counter()
    runs = [insp.service.submit(request(i)) for i in range(n_requests)]
    await wait_all(runs, window, timeout=args.seconds * 4 + 30)
    elapsed = time.perf_counter() - t0
    probe.stop()
    frames = window.frame_ms
    print(f"stalls: {n_requests} requests, {total_tokens} tokens in {elapsed:.1f} s "
          f"({total_tokens / elapsed:.0f} tokens/s delivered, target {args.tokens_per_s})")
    print(f"  event-loop lateness over {len(late)} 5 ms ticks: p50 {pct(late, 0.5):.1f} ms, "
          f"p99 {pct(late, 0.99):.1f} ms, max {max(late):.1f} ms  (target p99 <= 50 ms)")
    print(f"  frame work ({len(frames)} frames with updates): p50 {pct(frames, 0.5):.2f} ms, "
          f"p99 {pct(frames, 0.99):.2f} ms, mean {statistics.fmean(frames):.2f} ms")
    await insp.close()
    window.close()


async def memory(args, tmp: Path) -> None:
    rng = random.Random(2)
    n = args.hour_requests
    paths = []
    for i in range(n):
        p = tmp / f"turn{i}.txt"
        p.write_text(output(rng, rng.randint(600, 1200)), encoding="utf-8")
        paths.append(p)
    insp = make_inspector(paths, 0.0, args.max_documents)
    window = insp.window
    warm = min(200, n // 3)  # by then the metrics log (200 requests) and the document cap are full
    tokens = 0
    base = None
    t0 = time.perf_counter()
    marks = []
    for start in range(0, n, 20):
        runs = [insp.service.submit(request(i)) for i in range(start, min(n, start + 20))]
        await wait_all(runs, window, timeout=120)
        tokens += sum(len(r.tokens) for r in runs)
        done = min(n, start + 20)
        if base is None and done >= warm:
            gc.collect()
            base = rss_mb()
            base_tokens = tokens
        if done % (n // 6 or 1) == 0 or done == n:
            gc.collect()
            marks.append(f"{done}: {rss_mb():.0f}")
    gc.collect()
    end = rss_mb()
    elapsed = time.perf_counter() - t0
    docs = sum(1 for t in insp.store if not t.released)
    print(f"memory: {n} requests ({tokens} tokens, an hour of one request per "
          f"{3600 / n:.0f} s) simulated in {elapsed:.0f} s")
    print(f"  RSS after {warm} requests {base:.1f} MB, after {n} {end:.1f} MB: growth "
          f"{end - base:+.1f} MB over {tokens - base_tokens} more tokens "
          f"({(end - base) * 1024 / max(1, n - warm):.1f} kB per request); "
          f"{docs} documents kept (cap {args.max_documents}), {len(insp.store)} rows")
    print(f"  RSS (MB) after N requests: {', '.join(marks)}")
    await insp.close()
    window.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens-per-s", type=float, default=2000.0)
    ap.add_argument("--seconds", type=float, default=15.0, help="length of the stall replay")
    ap.add_argument("--hour-requests", type=int, default=600)
    ap.add_argument("--max-documents", type=int, default=32)
    args = ap.parse_args()
    app = QApplication.instance() or QApplication(sys.argv[:1])
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    with tempfile.TemporaryDirectory() as d, loop:
        loop.run_until_complete(stalls(args, Path(d)))
        loop.run_until_complete(memory(args, Path(d)))


if __name__ == "__main__":
    main()
