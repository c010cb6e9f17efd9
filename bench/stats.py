"""`prism stats` benchmark: the ledger over 10,000 recorded replies, end to end (reading the
JSONL, re-parsing each reply for its verdict, grouping, printing). Prints its figures; not part
of the test suite (the target, under 5 s on this machine, is a figure to read, not a test).
Runs on the main thread.

    python bench/stats.py [--replies 10000] [--files 4]

The recording is written by the real `Recorder`: each reply is one of a few Qwen3 outputs
(an answer, a call, a call in the thinking, an unfinished call, a stray closer), cut into
pseudo-tokens as a replay cuts text, with its parse as the recorded result.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.cli import main
from engine.backends.base import Finish, Timings, Token
from engine.parse.events import result_of
from engine.parse.reading import Reading
from engine.record.recording import Recorder
from engine.record.replay import split_text

CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "</function>\n</tool_call>")
OUTPUTS = [
    "The user greets me. I answer briefly.\n</think>\n\nHello! How can I help you today?",
    "Weather needs the tool.\n</think>\n\n" + CALL,
    "The user wants the weather.\n\n" + CALL,
    "ok\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
    "Plan.\n</think>\n\nAnswer</think> goes on for a while, as answers do.",
]
READING = Reading(start="reasoning", family="qwen-xml", tools_declared=True)


def write(path: Path, n: int, first: int) -> None:
    with Recorder(path, model="bench", pack="qwen3-xml",
                  info={"file": "bench.gguf", "quant": "Q4_K_M", "family": "qwen-xml",
                        "template": "0" * 12, "engine": "local"}) as rec:
        for k in range(first, first + n):
            text = OUTPUTS[k % len(OUTPUTS)]
            rid = f"r{k}"
            rec.request(rid, {"messages": [{"role": "user", "content": "hi"}]}, "",
                        reading=READING)
            pieces = split_text(text)
            for i, piece in enumerate(pieces):
                rec.token(rid, i, Token(i, piece, 0.0))
            parser = READING.parser(id_prefix="b")
            result = result_of(parser.feed(text) + parser.finish(), "stop")
            rec.finish(rid, Finish("stop", Timings(ttft_ms=50.0 + k % 7, decode_ms=1000.0,
                                                   output_tokens=len(pieces))), result)


def run(replies: int, files: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        paths = [Path(d) / f"s{i}.jsonl" for i in range(files)]
        per = replies // files
        for i, p in enumerate(paths):
            write(p, per if i < files - 1 else replies - per * (files - 1), i * per)
        size = sum(p.stat().st_size for p in paths) / 1e6
        out = io.StringIO()
        t0, c0 = time.perf_counter(), time.process_time()
        with contextlib.redirect_stdout(out):
            main(["stats", *map(str, paths)])
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    replies_line = next(line for line in out.getvalue().splitlines()
                        if line.startswith("replies"))
    print(f"prism stats: {replies} replies in {files} file(s), {size:.1f} MB: {dt:.2f} s "
          f"({replies / dt:,.0f} replies/s; target: under 5 s), {cpu:.2f} s of CPU")
    print(f"  ledger says: {replies_line.split()[-1]} replies")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replies", type=int, default=10_000)
    ap.add_argument("--files", type=int, default=4)
    a = ap.parse_args()
    run(a.replies, a.files)
