"""Filter benchmark: the request list's filter over 10,000 requests (inspector/query.py over
inspector/summaries.py's row summaries), the memory those summaries keep, and the same filter
through the list's Qt model (offscreen), which is what a keystroke in the filter bar costs.

Synthetic rows shaped like a coding agent's session: a 20,000-character rendered prompt (the
summary keeps its last 4,000), an output of about 1,500 characters read by the real parser,
one request in eight with a tool call, one in twenty cut inside one (an unfinished call), and
models, sources, slots and times spread over the rows. Prints median times; not part of the
test suite. Runs on the main thread, as the window's GUI thread would.

    QT_QPA_PLATFORM=offscreen python bench/filter.py [--rows 10000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.backends.base import Timings, Token
from engine.chat.request import ChatRequest, Message
from inspector.query import parse
from inspector.summaries import Index
from inspector.tracks import Track

EXPRESSIONS = [
    "needle",  # plain text, over prompt and output
    '"src/module_42.py"',
    "~anomaly unfinished_call & ~model gemma",
    "~tool read_file | ~tool write_file",
    "~verdict call_unfinished | ~finish length",
    "!~anomalous & ~src anthropic & ~slot 2",
    "~t 'def (main|run)\\(' & ~time 10:00..12:00",
    "~o timeout & !~model qwen",
    "~p needle",
]
WORDS = ("the file holds a function that reads the config and returns the parsed values "
         "so the caller can decide what to do next with them and write tests").split()
CALL = ("<tool_call>\n<function={name}>\n<parameter=path>\nsrc/module_{n}.py\n</parameter>\n"
        "</function>\n</tool_call>")


def _prose(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n // 6))


_PARSED: dict[str, tuple] = {}  # an output's events and result: outputs repeat, parse once


def _track(i: int, rng: random.Random, day: float) -> Track:
    ask = f"step {i}: look at src/module_{i % 97}.py " + _prose(rng, 200)
    if i % 500 == 0:
        ask += " needle"
    prompt = ("<|im_start|>system\n" + _prose(rng, 15_000) + "<|im_end|>\n<|im_start|>user\n"
              + ask + "<|im_end|>\n<|im_start|>assistant\n")
    out = PROSE[i % len(PROSE)] + (" def main(): timeout" if i % 37 == 0 else "")
    if i % 20 == 0:
        out += "\n\n" + CALL.format(name="write_file", n=i)[:70]  # cut inside the call
    elif i % 8 == 0:
        out += "\n\n" + CALL.format(name=rng.choice(("read_file", "write_file", "run")), n=i)
    track = Track(id=f"req-{i:05}", source=("openai", "anthropic", "responses")[i % 3],
                  model=("Qwen3-0.6B", "gemma3-270m")[(i // 3) % 2], prompt=prompt,
                  request=ChatRequest(messages=(Message("user", ask),)),
                  start_state="content", created=day + 8 * 3600 + i * 2.0)
    t0 = time.perf_counter()
    track.add_tokens(Token(k, out[k:k + 4], t0) for k in range(0, len(out), 4))
    if out not in _PARSED:
        _PARSED[out] = track.reparse()
    events, result = _PARSED[out]
    track.add_events(events)
    track.finish("length" if i % 50 == 0 else "stop", Timings(output_tokens=len(track.tokens),
                                                                slot=i % 4), result=result)
    return track


PROSE = [_prose(random.Random(k), 1_300) for k in range(16)]


def _median_ms(fn, repeat: int) -> tuple[float, float]:
    """Median wall and CPU milliseconds (CPU: what the filter costs on a busy machine)."""
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - t0) * 1000.0)
        cpu.append((time.process_time() - c0) * 1000.0)
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    rng = random.Random(7)
    day = time.mktime((2025, 3, 4, 0, 0, 0, 0, 0, -1))

    t0 = time.perf_counter()
    index = Index()
    tracks = []
    summarize_s = 0.0
    held = 0  # bytes the summaries keep (traced around each one's making)
    for i in range(args.rows):
        track = _track(i, rng, day)
        tracemalloc.start()
        s0 = time.perf_counter()
        index.update(track)  # the frame that sees it finished
        summarize_s += time.perf_counter() - s0
        held += tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        track.release()  # as the store does past its newest 32: only the summary is left
        tracks.append(track)
    gc.collect()
    print(f"{args.rows} rows made in {time.perf_counter() - t0:.1f} s; summarizing one: "
          f"{summarize_s / args.rows * 1e6:.0f} µs")
    summaries = [index.update(t) for t in tracks]  # released: the kept summaries
    text = sum(len(s.prompt) + len(s.output) + len(s.first_words) for s in summaries)
    print(f"memory the summaries of {args.rows} rows keep (tracemalloc): {held / 2**20:.1f} MiB"
          f", of which text {text / 2**20:.1f} MiB ({held / args.rows / 1024:.1f} KiB a row)")

    print(f"\n{'expression':48} {'rows':>6} {'wall ms':>8} {'CPU ms':>7}  (medians)")
    for expr in EXPRESSIONS:
        query = parse(expr)
        n = len(query.filter(summaries))
        ms = _median_ms(lambda q=query: q.filter(index.update(t) for t in tracks), args.repeat)
        print(f"{expr:48} {n:>6} {ms[0]:>8.1f} {ms[1]:>7.1f}")

    if os.environ.get("QT_QPA_PLATFORM") != "offscreen" and not os.environ.get("DISPLAY"):
        return
    from PySide6.QtWidgets import QApplication

    from widgets.request_log import RequestLog

    app = QApplication.instance() or QApplication([])
    log = RequestLog()
    log.resize(900, 500)
    log.show()
    log.model.summaries = index  # the summaries made while the rows held their text
    for t in tracks:
        log.model.add(t)
    app.processEvents()
    print(f"\nthrough the request list's model and view ({args.rows} rows, offscreen):")
    for expr in [*EXPRESSIONS[:4], ""]:
        ms = _median_ms(lambda e=expr: (log.bar.set_text(e + " "), log.bar.set_text(e),
                                        app.processEvents()), args.repeat)
        print(f"{expr or '(no filter)':48} {log.model.rowCount():>6} {ms[0] / 2:>8.1f} "
              f"{ms[1] / 2:>7.1f}")


if __name__ == "__main__":
    main()
