"""Reload benchmark: how long the window takes to read a released request back from a large
recording. Prints its figures; not part of the test suite.

    python bench/reload.py [--mb 100] [--samples 50] [--keep FILE.jsonl]

Writes a synthetic agent session with the real `Recorder` (prompts of about 30 KB, replies of
about 600 tokens with reasoning and a call, so the file is mostly token lines, as real ones
are) until it holds `--mb` megabytes, then:

1. Index: the offsets of every request found by scanning the file (what opening it costs on
   top of reading it), and the recorder's own offsets checked against them.
2. Reload: a released row of a random request selected, as the window selects it
   (`TrackStore.protected`): one seek, that request's lines parsed, its tokens fed through a
   fresh pipeline. The median and p95 over `--samples` requests, and the read alone.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.backends.base import Finish, Timings, Token
from engine.parse.reading import Reading
from engine.record.index import Home, RecordingIndex, index_of, load_home
from engine.record.recording import Recorder
from inspector.tracks import Track, TrackStore

WORDS = ("the model checks the file then compares values before it answers with care about "
         "`inline code` and a few numbers like 42 or 3.14 while thinking step by step").split()


def reply(rng: random.Random, n: int) -> list[str]:
    words = [rng.choice(WORDS) + " " for _ in range(n - 12)]
    cut = len(words) * 2 // 3
    call = ["\n<tool_call>\n", "<function=run>\n", "<parameter=cmd>\n", "ls -la",
            "\n</parameter>\n", "</function>\n", "</tool_call>", "", "", "", ""]
    return [*words[:cut], "\n</think>\n\n", *words[cut:], *call]


def write(path: Path, megabytes: float, seed: int = 7) -> tuple[Recorder, list[str]]:
    rng = random.Random(seed)
    rec = Recorder(path, model="bench", pack="qwen3-xml")
    reading = Reading(start="reasoning", family="qwen-xml", tools=(
        {"type": "function", "function": {"name": "run", "parameters": {
            "type": "object", "properties": {"cmd": {"type": "string"}}}}},),
        tools_declared=True)
    ids, i = [], 0
    while path.stat().st_size < megabytes * 1e6:
        rid = f"req-{i}-{rng.randrange(16 ** 6):06x}"
        prompt = " ".join(rng.choice(WORDS) for _ in range(5000))  # ~30 KB: an agent's turn
        rec.request(rid, {"messages": [{"role": "user", "content": prompt[-2000:]}]}, prompt,
                    reading=reading, api="openai", t0=0.0)
        for k, text in enumerate(reply(rng, 600)):
            rec.token(rid, k, Token(1000 + k, text, 0.02 * (k + 1)))
        rec.finish(rid, Finish("tool_calls", Timings(output_tokens=600, prompt_tokens=6000)))
        ids.append(rid)
        i += 1
    rec.close()
    return rec, ids


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--keep", type=Path, help="write the recording here (default: a temp file)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "session.jsonl"
        t0 = time.perf_counter()
        rec, ids = write(path, args.mb)
        size = path.stat().st_size / 1e6
        print(f"recording: {size:.0f} MB, {len(ids)} requests "
              f"(written in {time.perf_counter() - t0:.1f} s)")

        t0 = time.perf_counter()
        scanned = RecordingIndex(path)
        n = scanned.scan()
        scan_ms = (time.perf_counter() - t0) * 1000
        assert n == len(ids) and all(scanned.offset(r) == rec.offsets[r] for r in ids)
        print(f"index: {n} offsets by scanning in {scan_ms:.0f} ms "
              f"(the recorder's own offsets agree)")

        index_of(path).scan()
        rng = random.Random(1)
        picks = [rng.choice(ids) for _ in range(args.samples)]
        reads, reloads = [], []
        for rid in picks:
            t0 = time.perf_counter()
            load_home(Home(path, rid))
            reads.append((time.perf_counter() - t0) * 1000)
        store = TrackStore()
        for rid in picks:
            track = Track(id=rid, home=Home(path.resolve(), rid), status="done",
                          finish_reason="tool_calls")
            track.release()
            t0 = time.perf_counter()
            store.protected = track  # selected: read back
            reloads.append((time.perf_counter() - t0) * 1000)
            assert not track.released and len(track.tokens) == 600 and track.result.tool_calls
        reloads.sort()
        print(f"read one request back: median {statistics.median(reads):.1f} ms")
        print(f"reload a released row (read + parse + panes' document): median "
              f"{statistics.median(reloads):.1f} ms, p95 {reloads[int(len(reloads) * .95) - 1]:.1f}"
              f" ms, max {reloads[-1]:.1f} ms over {len(reloads)} requests")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
