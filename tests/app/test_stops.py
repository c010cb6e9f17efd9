"""app/serve.py: every way of stopping `prism serve` keeps what Ctrl-C keeps.

Each signal is sent to a real server (the default model, a disk cache and a recording of its
own) at the worst moment for the two requests it cuts at once, a long prompt being read and a
stream half written, seconds after a reply that is long enough to be saved. (The stop within
milliseconds of a reply, while its save is written, is bench/faults.py's "after reply" and
"during save": beside a generating sequence a prompt is read too slowly on a shared CPU to end
a reply in the middle of a stream within a test's time.) Then: exit status 0, no temporary
cache file, the reply's entry on disk, the recording whole with both cut requests marked as cut
by the stop (not cancelled by their clients), and a replay of that recording answering the cut
stream with the recorded tokens. A worker thread dying of an uncaught error is checked on real
threads.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn

from app.serve import StopSignals
from engine.record.reader import read_session
from engine.record.recording import SHUTDOWN
from engine.record.replay import ReplayEngine
from tests.support import wait_healthy, wait_until

ROOT = Path(__file__).resolve().parents[2]
SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
# A shared 2-core machine reads the prompts slowly: room for the slowest, never a pass/fail line.
pytestmark = pytest.mark.timeout(900)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(*args: str, log: Path) -> tuple[subprocess.Popen, int]:
    port = _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PRISM_API_KEY", None)
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "app", "serve", "--port", str(port),
                                 *args], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    return proc, port


def _slots_busy(http: httpx.Client) -> int:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("prism_slots_busy"):
            return int(float(line.split()[-1]))
    raise AssertionError("/metrics has no prism_slots_busy")


def _entries(kv: Path) -> list[int]:
    """The token counts of the disk cache's files (magic, u32 length, JSON header)."""
    counts = []
    for f in kv.rglob("*.kv"):
        with f.open("rb") as fh:
            head = fh.read(12)
            counts.append(json.loads(fh.read(struct.unpack("<I", head[8:12])[0]))["n_tokens"])
    return counts


def _stream_messages(sig: str) -> list[dict]:
    # An assistant turn to continue: the model counts on, so the stream cannot end by itself
    # before the signal.
    return [{"role": "user", "content": f"Count from 1 to 2000 ({sig})."},
            {"role": "assistant", "content": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"}]


@dataclass(frozen=True)
class Stopped:
    sig: str
    returncode: int
    log: str
    kv: Path
    recording: Path
    reply_usage: dict  # the request that ended just before the signal
    streamed: int  # content chunks the cut stream's client received


@pytest.fixture(scope="module", params=SIGNALS)
def stopped(request, default_model, tmp_path_factory) -> Stopped:
    sig = request.param
    tmp = tmp_path_factory.mktemp(sig.lower())
    proc, port = _serve("--cache-dir", str(tmp / "kv"), "--record-to", str(tmp / "rec.jsonl"),
                        "--n-ctx", "4096", "--log-level", "info", log=tmp / "log.txt")
    chunks: list[str] = []
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300) as http:
            wait_healthy(http, proc, 120)

            def stream() -> None:
                body = {"messages": _stream_messages(sig), "stream": True, "max_tokens": 3900,
                        "temperature": 0}
                try:
                    with http.stream("POST", "/v1/chat/completions", json=body) as r:
                        for line in r.iter_lines():
                            if line.startswith("data: {"):
                                delta = json.loads(line[6:])["choices"][0]["delta"]
                                if delta.get("content"):
                                    chunks.append(delta["content"])
                except httpx.TransportError:
                    pass  # the server went away: that is the test

            # ~300 tokens, long enough to be saved: answered just before the others start.
            words = " ".join(f"item{i}" for i in range(85))
            reply = http.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": f"{sig}: {words}. Say ok."}],
                "max_tokens": 4, "temperature": 0})
            assert reply.status_code == 200, reply.text

            def prefill() -> None:
                long = " ".join(f"line {i} of a long {sig} prompt" for i in range(300))
                with contextlib.suppress(httpx.TransportError):  # the server went away
                    http.post("/v1/chat/completions", json={
                        "messages": [{"role": "user", "content": long}], "max_tokens": 4})

            streaming = threading.Thread(target=stream, daemon=True)
            streaming.start()
            wait_until(lambda: len(chunks) >= 1, 180, 0.05, "the stream's first chunk")
            # Beside a generating sequence a prompt is read in small chunks on a CPU
            # (engine/backends/llama/chunks.py): this one is still being read at the signal.
            reading = threading.Thread(target=prefill, daemon=True)
            reading.start()
            wait_until(lambda: len(chunks) >= 3, 180, 0.05, "the stream's chunks")
            wait_until(lambda: _slots_busy(http) >= 2, 120, 0.05, "the long prompt's slot")
            proc.send_signal(getattr(signal, sig))
            rc = proc.wait(180)
            streaming.join(30)
            reading.join(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    return Stopped(sig, rc, (tmp / "log.txt").read_text(), tmp / "kv", tmp / "rec.jsonl",
                   reply.json()["usage"], len(chunks))


@pytest.mark.model
def test_a_requested_stop_exits_0_and_leaves_no_temporary_file(stopped):
    assert stopped.returncode == 0, stopped.log[-3000:]
    assert f"prism: stopping ({stopped.sig}): closing the engine and the recording" \
        in stopped.log
    assert not list(stopped.kv.rglob("*.tmp-*"))


@pytest.mark.model
def test_the_reply_before_the_signal_keeps_its_cache_entry(stopped):
    # Saved whole: its prompt and reply (all but the last token, which was never decoded).
    usage = stopped.reply_usage
    whole = usage["prompt_tokens"] + usage["completion_tokens"]
    assert any(usage["prompt_tokens"] <= n <= whole for n in _entries(stopped.kv)), \
        (_entries(stopped.kv), usage, stopped.log[-3000:])


@pytest.mark.model
def test_the_cut_requests_are_recorded_as_cut_by_the_stop(stopped):
    session = read_session(stopped.recording)  # strict: every line whole
    assert len(session.requests) == 3
    reply, streamed, prefill = session.requests
    assert reply.finish in ("stop", "length") and reply.cancelled_by == ""
    for cut in (streamed, prefill):
        assert (cut.finish, cut.cancelled_by) == ("cancelled", SHUTDOWN), stopped.log[-3000:]
    assert prefill.tokens == ()  # it was still reading its prompt
    assert len(streamed.tokens) >= stopped.streamed >= 3


@pytest.mark.model
def test_a_replay_of_the_cut_stream_answers_its_recorded_tokens(stopped, tmp_path):
    # A client's own cancel replays as a cancel (503); a stream the server's stop cut replays
    # what was recorded, as a stream a crash cut does.
    recorded = read_session(stopped.recording).requests[1]
    proc, port = _serve("--replay", str(stopped.recording), "--no-record", "--log-level",
                        "warning", log=tmp_path / "replay.txt")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            wait_healthy(http, proc, 60)
            r = http.post("/v1/chat/completions", json={"messages": _stream_messages(stopped.sig)})
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["message"]["content"] == recorded.text
    assert choice["finish_reason"] == "length"
    assert proc.returncode == 0


# -- a worker thread's uncaught error ----------------------------------------------------------


def _die_on(name: str) -> None:
    def boom() -> None:
        raise RuntimeError("a bug in a worker")

    t = threading.Thread(target=boom, name=name)
    t.start()
    t.join()


@pytest.fixture
def hooked(tmp_path):
    """A StopSignals around a real (unstarted) uvicorn server, as threading.excepthook, over
    a real replay engine; the hook is put back afterwards."""
    out = tmp_path / "out.txt"
    out.write_text("Hello.")
    engine = ReplayEngine([out])
    server = uvicorn.Server(uvicorn.Config(app=None))
    stop = StopSignals(server)
    old = threading.excepthook
    threading.excepthook = lambda a: stop.thread_died(a, engine)
    yield stop, engine
    threading.excepthook = old
    engine.close()


def test_a_dead_engine_thread_stops_the_server_as_a_failure(hooked, caplog):
    stop, engine = hooked
    engine.close()  # what the worker's own `finally` leaves when its loop raised
    with caplog.at_level(logging.ERROR, logger="prism"):
        _die_on("prism-replay")
    assert stop.server.should_exit
    assert stop.failed == "the engine's thread (prism-replay) stopped on an error"
    assert "thread prism-replay stopped on an uncaught error" in caplog.text
    assert "RuntimeError: a bug in a worker" in caplog.text


def test_another_thread_dying_is_logged_and_the_server_goes_on(hooked, caplog):
    stop, _ = hooked  # the engine still runs: a writer thread died, say
    with caplog.at_level(logging.ERROR, logger="prism"):
        _die_on("prism-kv-save")
    assert not stop.server.should_exit and stop.failed == ""
    assert "thread prism-kv-save stopped on an uncaught error" in caplog.text


def _catches(pid: int, sig: signal.Signals) -> bool:
    """Whether the process has a handler of its own for `sig` (/proc's SigCgt mask)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_a_signal_while_the_server_is_set_up_is_a_clean_stop(tmp_path, sig):
    """`prism serve` takes the stop signals first, before it builds anything: a signal while
    it sets up (here: reading a large output to replay, which takes seconds) stops it as a
    request, exit 0 and nothing served, not a kill with the default action (-15, -1)."""
    big = tmp_path / "big.txt"
    big.write_text("word " * 4_000_000, encoding="utf-8")  # 20 MB: seconds to split
    proc, _port = _serve("--replay", str(big), "--record-to", str(tmp_path / "rec.jsonl"),
                         log=tmp_path / "log")
    try:
        wait_until(lambda: _catches(proc.pid, signal.SIGTERM) or proc.poll() is not None,
                   timeout=60)
        proc.send_signal(getattr(signal, sig))
        assert proc.wait(timeout=120) == 0, (tmp_path / "log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (tmp_path / "log").read_text()
    assert "Traceback" not in log
    assert f"stopping ({sig}) before serving" in log, log
