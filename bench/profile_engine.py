"""Where the engine thread's time goes per token: `py-spy record --native` over `prism serve`.

    python bench/profile_engine.py [--streams 1] [--tokens 256] [--requests 3] [--rate 250]
                                   [--threads 1] [--top 25] [--keep FILE]

Starts `prism serve` (default model, --no-disk-cache, --no-record, `--threads` decode
threads, `--parallel` = streams), warms it up, then records it with py-spy (native frames on)
while `--streams` clients stream `--requests` greedy chats of `--tokens` tokens each. Of the
samples, only the engine thread's are counted (the stacks under `LlamaEngine._loop`); each
function's inclusive samples are turned into milliseconds per generated token (samples /
rate / tokens), so figures from runs with different lengths compare. py-spy's sampling stops
the process briefly each time: the absolute rate drops a little, the shares do not. Needs
py-spy (`pip install py-spy`) and ptrace rights over the child. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, free_port, wait_http
from bench.peer_servers import stream_chat

STORY = ("Write a long, detailed story about a lighthouse keeper who finds an old map hidden "
         "in the wall. Describe the sea, the weather and the town.")
ENGINE_ROOT = "LlamaEngine._loop (engine/backends/llama/engine.py"
FRAME = re.compile(r"^(.*?) \((.*?)(?::\d+)?\)$")


def frame_name(frame: str) -> str:
    """`func (path:line)` -> `func (path)`: a function's samples summed over its lines."""
    m = FRAME.match(frame)
    return f"{m.group(1)} ({Path(m.group(2)).name})" if m else frame


def summarise(raw: Path, tokens: int, rate: int, top: int) -> str:
    incl: collections.Counter[str] = collections.Counter()
    leaf: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if ENGINE_ROOT not in stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        at = next(i for i, f in enumerate(frames) if ENGINE_ROOT in f)
        names = [frame_name(f) for f in frames[at + 1:]]
        total += n
        for name in set(names):
            incl[name] += n
        leaf[names[-1] if names else "_loop (engine.py)"] += n
    ms = 1000.0 / rate / max(tokens, 1)
    out = [f"engine thread: {total} samples at {rate}/s over {tokens} tokens = "
           f"{total * ms:.2f} ms/token",
           f"{'inclusive ms/token':>20}  {'self':>6}  function"]
    for name, n in incl.most_common(top):
        out.append(f"{n * ms:20.3f}  {leaf[name] * ms:6.3f}  {name}")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--requests", type=int, default=3, help="requests per stream")
    ap.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--keep", help="also write py-spy's raw (collapsed) stacks here")
    args = ap.parse_args()

    spy = Path(sys.executable).parent / "py-spy"
    port = free_port()
    cmd = [sys.executable, "-m", "app", "serve", "--pack", "smollm2", "--port", str(port),
           "--parallel", str(args.streams), "--n-ctx", "2048", "--threads", str(args.threads),
           "--no-disk-cache", "--no-record", "--log-level", "warning"]
    log = Path(tempfile.mkdtemp(prefix="prism-profile-")) / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    raw = Path(args.keep) if args.keep else Path(tempfile.mktemp(suffix=".txt"))
    try:
        wait_http(url + "/health", proc, timeout=300)
        stream_chat(url, {"messages": [{"role": "user", "content": "Say hello."}],
                          "max_tokens": 16})
        rec = subprocess.Popen([str(spy), "record", "--native", "--format", "raw", "-r",
                                str(args.rate), "-o", str(raw), "-p", str(proc.pid)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        n = [0] * args.streams
        tps: list[float] = []

        def client(i: int) -> None:
            for r in range(args.requests):
                body = {"messages": [{"role": "user", "content": f"Story {i}-{r}. {STORY}"}],
                        "max_tokens": args.tokens}
                rep = stream_chat(url, body)
                n[i] += rep.n
                tps.append(rep.tps)

        clients = [threading.Thread(target=client, args=(i,)) for i in range(args.streams)]
        for t in clients:
            t.start()
        for t in clients:
            t.join()
        rec.send_signal(signal.SIGINT)
        rec.wait(60)
        tokens = sum(n)
        print(f"{args.streams} stream(s), {tokens} tokens; per-request decode tok/s under the "
              f"profiler: {', '.join(f'{x:.1f}' for x in tps)}; load {os.getloadavg()[0]:.2f}")
        print(summarise(raw, tokens, args.rate, args.top))
    finally:
        proc.terminate()
        proc.wait(30)
        if not args.keep:
            raw.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
