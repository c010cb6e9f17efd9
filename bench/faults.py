"""Fault suite: `prism serve` stopped, fed bad cache files, flooded and given hostile schemas,
each as a real process on the default model, judged from outside (exit status, files left,
the recording, HTTP answers). Prints one row per scenario and a summary line. Not part of the
test suite (tests/app/test_stops.py checks the signals at their worst moment).

    python bench/faults.py                       # every scenario
    python bench/faults.py --only SIGTERM,burst  # rows whose name holds any of these
    python bench/faults.py --save-tokens 3000 --timeout 300

Scenarios:
  SIG after reply     a ~300-token reply, the signal as soon as it is answered (its entry saved?)
  SIG during save     a --save-tokens reply alone, the signal as soon as it is answered: its
                      state is being copied out and written when the signal comes
  SIG during prefill  a long prompt, the signal while it is read (recorded as the stop's cut?)
  SIG mid-stream      a stream, the signal after its fifth chunk; then `prism serve --replay`
                      of the recording must answer with the recorded tokens
  planted files       a truncated, a corrupt, a foreign and a stale temporary file in the cache
                      folder: the request is answered, the truncated and the temporary file
                      deleted (a corrupt one goes when a load checks it; a foreign one stays)
  burst               12 requests at once over --max-queue 2 --parallel 1: 200s and 429s with
                      Retry-After, nothing left running
  hostile schemas     schemas no value matches, not a schema, nested 2,000 deep, a pathological
                      pattern, counts once fatal to the process (maxLength 20,000, maxItems
                      100,000, {0,100000}), a quote in an enum, a 10,000-value enum: each a
                      200 or a 400 (never a 500, never a crash) and /health still answering
SIG is each of SIGINT, SIGTERM and SIGHUP. Every scenario is bounded by --timeout.

Runs on the main thread; clients are threads of this process.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, free_port, wait_http
from engine.record.reader import read_session
from engine.record.recording import SHUTDOWN

SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
Row = tuple[str, bool, str]  # scenario, as expected, what happened


class Server:
    """`prism serve` on a free port, its output in `log`."""

    def __init__(self, tmp: Path, *args: str, timeout: float) -> None:
        self.port, self.log = free_port(), tmp / f"serve-{time.monotonic_ns()}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("PRISM_API_KEY", None)
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "app", "serve", "--port", str(self.port), "--n-ctx",
                 "4096", *args], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=timeout)
        wait_http(f"http://127.0.0.1:{self.port}/health", self.proc, timeout)

    def stop(self, sig: str = "SIGTERM", timeout: float = 60) -> tuple[int, float]:
        t = time.monotonic()
        self.proc.send_signal(getattr(signal, sig))
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait(10)
        self.http.close()
        return rc, time.monotonic() - t

    def chat(self, content: str, **kw) -> httpx.Response:
        return self.http.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": content}], "temperature": 0, **kw})

    def busy(self) -> int:
        for line in self.http.get("/metrics").text.splitlines():
            if line.startswith("prism_slots_busy"):
                return int(float(line.split()[-1]))
        return 0


def _until(ok: Callable[[], object], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _entries(kv: Path) -> list[int]:
    """Token counts of the cache's files (magic, u32 header length, JSON header)."""
    out = []
    for f in kv.rglob("*.kv"):
        with f.open("rb") as fh, contextlib.suppress(ValueError, KeyError, struct.error):
            head = fh.read(12)
            out.append(json.loads(fh.read(struct.unpack("<I", head[8:12])[0]))["n_tokens"])
    return out


def _temps(kv: Path) -> int:
    return len(list(kv.rglob("*.tmp-*")))


def _words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def after_reply(tmp: Path, sig: str, n_words: int, timeout: float, label: str) -> Row:
    kv = tmp / "kv"
    s = Server(tmp, "--cache-dir", str(kv), "--no-record", timeout=timeout)
    r = s.chat(f"{sig} {label}: {_words(n_words, 'w')}", max_tokens=4)
    usage = r.json()["usage"]
    rc, took = s.stop(sig)
    n = usage["prompt_tokens"] + usage["completion_tokens"]
    kept = any(usage["prompt_tokens"] <= e <= n for e in _entries(kv))
    temps = _temps(kv)
    ok = rc == 0 and kept and temps == 0
    return (f"{sig} {label}", ok, f"exit {rc} in {took:.1f} s, {n}-token entry "
            f"{'kept' if kept else 'LOST'}, {temps} temp files")


def during_prefill(tmp: Path, sig: str, timeout: float) -> Row:
    kv, rec = tmp / "kv", tmp / "rec.jsonl"
    s = Server(tmp, "--cache-dir", str(kv), "--record-to", str(rec), timeout=timeout)
    threading.Thread(target=_quiet, args=(s.chat, f"{sig}: {_words(900, 'line')}"),
                     kwargs={"max_tokens": 4}, daemon=True).start()
    _until(lambda: s.busy() >= 1, timeout)
    time.sleep(1.0)  # into the prompt, not at its first chunk
    rc, took = s.stop(sig)
    (req,) = read_session(rec).requests
    temps = _temps(kv)
    ok = rc == 0 and req.cancelled_by == SHUTDOWN and temps == 0
    return (f"{sig} during prefill", ok, f"exit {rc} in {took:.1f} s, recorded "
            f"{req.finish}/{req.cancelled_by or 'client'}, {temps} temp files")


def _quiet(fn: Callable, *a, **kw) -> None:
    with contextlib.suppress(httpx.TransportError):
        fn(*a, **kw)


def mid_stream(tmp: Path, sig: str, timeout: float) -> Row:
    kv, rec = tmp / "kv", tmp / "rec.jsonl"
    s = Server(tmp, "--cache-dir", str(kv), "--record-to", str(rec), timeout=timeout)
    messages = [{"role": "user", "content": f"Count to 2000 ({sig})."},
                {"role": "assistant", "content": "1, 2, 3, 4, 5,"}]
    chunks: list[str] = []

    def stream() -> None:
        body = {"messages": messages, "stream": True, "max_tokens": 3000, "temperature": 0}
        with contextlib.suppress(httpx.TransportError), \
                s.http.stream("POST", "/v1/chat/completions", json=body) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    chunks.append(line)

    threading.Thread(target=stream, daemon=True).start()
    _until(lambda: len(chunks) >= 5, timeout)
    rc, took = s.stop(sig)
    (req,) = read_session(rec).requests
    replay = Server(tmp, "--replay", str(rec), "--no-record", timeout=timeout)
    r = replay.http.post("/v1/chat/completions", json={"messages": messages})
    replay.stop()
    same = r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == req.text
    ok = rc == 0 and req.cancelled_by == SHUTDOWN and same and _temps(kv) == 0
    return (f"{sig} mid-stream", ok, f"exit {rc} in {took:.1f} s, recorded "
            f"{req.finish}/{req.cancelled_by or 'client'} after {len(req.tokens)} tokens, "
            f"replay {r.status_code} {'with' if same else 'WITHOUT'} the recorded tokens")


def planted(tmp: Path, timeout: float) -> Row:
    kv = tmp / "kv"
    Server(tmp, "--cache-dir", str(kv), "--no-record", timeout=timeout).stop()
    (ns,) = kv.glob("ns-*")
    # Named as the cache names its files (a digest), or it leaves them alone as not its own.
    files = {"truncated": ns / f"{'a' * 32}.kv", "corrupt": ns / f"{'b' * 32}.kv",
             "foreign": ns / f"{'c' * 32}.kv", "stale temp": ns / f"{'d' * 32}.kv.tmp-1-1"}
    head = json.dumps({"namespace": ns.name[3:], "n_tokens": 300, "state_bytes": 10,
                       "digest": "00000000", "created": 0}).encode()
    files["truncated"].write_bytes(b"PRISMKV2" + struct.pack("<I", len(head)) + head + b"x")
    files["corrupt"].write_bytes(b"PRISMKV2" + struct.pack("<I", len(head)) + head
                                 + b"\0" * 1210)
    other = head.replace(ns.name[3:].encode(), b"ffffffffffffffff")
    files["foreign"].write_bytes(b"PRISMKV2" + struct.pack("<I", len(other)) + other + b"\0" * 9)
    files["stale temp"].write_bytes(b"half a save")
    os.utime(files["stale temp"], (0, 0))
    s = Server(tmp, "--cache-dir", str(kv), "--no-record", timeout=timeout)
    r = s.chat(_words(120, "p"), max_tokens=4)
    rc, _ = s.stop()
    left = [k for k, p in files.items() if p.exists()]
    # A corrupt file is found by its checksum when it is loaded; this one matches no prompt.
    ok = r.status_code == 200 and rc == 0 and left == ["corrupt", "foreign"]
    return ("planted files", ok, f"answered {r.status_code}, exit {rc}, left: "
            f"{', '.join(left) or 'none'} (expected: corrupt, foreign)")


def burst(tmp: Path, timeout: float) -> Row:
    s = Server(tmp, "--no-record", "--no-disk-cache", "--max-queue", "2", "--parallel", "1",
               timeout=timeout)
    answers: list[httpx.Response] = []

    def one(i: int) -> None:
        with contextlib.suppress(httpx.TransportError):
            answers.append(s.chat(f"Say {i}.", max_tokens=8))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    codes = sorted(r.status_code for r in answers)
    retry = all(r.headers.get("retry-after") for r in answers if r.status_code == 429)
    idle = _until(lambda: s.busy() == 0, 30)
    rc, _ = s.stop()
    ok = set(codes) <= {200, 429} and 429 in codes and retry and idle and rc == 0
    return ("burst over --max-queue", ok, f"{codes.count(200)}×200, {codes.count(429)}×429 "
            f"(Retry-After {'on each' if retry else 'MISSING'}), idle after: {idle}, exit {rc}")


def hostile(tmp: Path, timeout: float) -> list[Row]:
    s = Server(tmp, "--no-record", "--no-disk-cache", timeout=timeout)
    # JSON text, not objects: the client's own encoder cannot nest 2,000 levels.
    deep = '{"type": "array", "items": ' * 2000 + '{"type": "string"}' + "}" * 2000
    schemas = {"enum []": '{"enum": []}', "not a schema": '{"type": 5}',
               "nested 2,000 deep": deep,
               "pattern (a+)+$": json.dumps({"type": "string", "pattern": "^(a+)+$" * 50}),
               # Once a segfault (llama.cpp's grammar parser recursing once per count), and a
               # quote that once made an invalid grammar: engine/grammar/bounds.py.
               "maxLength 20,000": json.dumps({"type": "object", "properties": {
                   "s": {"type": "string", "maxLength": 20000}}}),
               "maxItems 100,000": json.dumps({"type": "array", "items": {"type": "integer"},
                                               "maxItems": 100000}),
               "pattern {0,100000}": json.dumps({"type": "string",
                                                 "pattern": "^.{0,100000}$"}),
               "quote in an enum": json.dumps({"enum": ['say "hi"', "a\\b"]}),
               "10,000-value enum": json.dumps({"enum": [f"v{i}" for i in range(10000)]})}
    rows = []
    for name, schema in schemas.items():
        t = time.monotonic()
        body = ('{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, '
                '"response_format": {"type": "json_schema", "json_schema": {"name": "x", '
                f'"schema": {schema}}}}}}}')
        try:
            r = s.http.post("/v1/chat/completions", content=body,
                            headers={"content-type": "application/json"})
            code = r.status_code
        except httpx.TransportError as e:
            code = type(e).__name__
        health = s.http.get("/health").status_code
        rows.append((f"schema: {name}", code in (200, 400) and health == 200,
                     f"{code} in {time.monotonic() - t:.1f} s, /health {health}"))
    s.stop()
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="", help="comma-separated parts of scenario names")
    p.add_argument("--save-tokens", type=int, default=1500,
                   help="words of the 'during save' reply (~3.5 tokens each in SmolLM2)")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds per scenario step")
    a = p.parse_args()
    only = [w.strip().lower() for w in a.only.split(",") if w.strip()]
    plan: list[tuple[str, Callable[[Path], Row | list[Row]]]] = []
    for sig in SIGNALS:
        plan += [
            (f"{sig} after reply", lambda d, s=sig: after_reply(d, s, 85, a.timeout,
                                                                 "after reply")),
            (f"{sig} during save", lambda d, s=sig: after_reply(d, s, a.save_tokens // 4,
                                                                 a.timeout, "during save")),
            (f"{sig} during prefill", lambda d, s=sig: during_prefill(d, s, a.timeout)),
            (f"{sig} mid-stream", lambda d, s=sig: mid_stream(d, s, a.timeout)),
        ]
    plan += [("planted files", lambda d: planted(d, a.timeout)),
             ("burst over --max-queue", lambda d: burst(d, a.timeout)),
             ("hostile schemas", lambda d: hostile(d, a.timeout))]
    rows: list[Row] = []
    for name, run in plan:
        if only and not any(w in name.lower() for w in only):
            continue
        with tempfile.TemporaryDirectory(prefix="prism-faults-") as d:
            try:
                got = run(Path(d))
            except Exception as e:  # a scenario that breaks is a row, not the end of the run
                got = (name, False, f"{type(e).__name__}: {e}")
        for row in got if isinstance(got, list) else [got]:
            rows.append(row)
            print(f"{'ok  ' if row[1] else 'FAIL'}  {row[0]:26}  {row[2]}", flush=True)
    good = sum(1 for _, ok, _ in rows if ok)
    print(f"faults: {good} of {len(rows)} scenarios as expected")
    return 0 if good == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
