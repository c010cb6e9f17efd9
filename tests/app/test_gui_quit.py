"""app/gui.py, app/gui_quit.py: every way out of a real `prism` window process stops the server,
the engine and the recorder in order and exits 0, with no traceback, also during start-up.

Each test runs `prism` as a user does (a subprocess, offscreen, its own data, cache and config
folders). The UI ways (the close button's close, File → Quit, Ctrl+Q through Qt's shortcut
map) are asked for by the hidden `--quit-by` hook on SIGUSR1, so the test chooses the moment;
SIGINT and SIGTERM are sent as they are."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from engine.record.reader import read_session
from tests.support import DEMO, ROOT, wait_until

STOPPED = "[prism] stopped the server, the engine and the recorder ("


def start_prism(tmp_path: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen",
           "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "XDG_CONFIG_HOME": str(tmp_path / "config")}
    return subprocess.Popen([sys.executable, "-m", "app", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sessions(tmp_path: Path) -> list[Path]:
    folder = tmp_path / "data" / "prism" / "sessions"
    return sorted(folder.glob("*.jsonl")) if folder.is_dir() else []


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    _out, err = proc.communicate(timeout=90)
    return proc.returncode, err


def served(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("how", ["close", "menu", "keys", "SIGINT", "SIGTERM"])
def test_every_way_out_closes_down_in_order_and_exits_0(tmp_path, how):
    port = free_port()
    ui = how in ("close", "menu", "keys")
    proc = start_prism(tmp_path, "--replay", str(DEMO), "--port", str(port),
                       *(("--quit-by", how) if ui else ()))
    try:
        wait_until(lambda: served(port) or proc.poll() is not None, 60, 0.1, "the server")
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        # The demo's first request, which the replay answers as recorded.
        messages = read_session(DEMO).requests[0].request["messages"]
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=30,
                           json={"model": "m", "messages": [
                               {"role": m["role"], "content": m["content"]} for m in messages]})
        assert reply.status_code == 200, reply.text
        proc.send_signal(signal.SIGUSR1 if ui else getattr(signal, how))
        code, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert code == 0, err[-3000:]
    assert "Traceback" not in err and "Error" not in err, err[-3000:]
    (path,) = sessions(tmp_path)
    assert f"{STOPPED}{path})" in err  # the last step, after the server and the engine
    # The recorder closed its file complete: a strict read finds every request finished.
    session = read_session(path)
    assert len(session.requests) == 1 and session.requests[0].finish == "stop"
    assert path.read_bytes().endswith(b"\n")
    assert not served(port)


def test_a_signal_during_start_up_is_a_clean_stop(tmp_path, default_model):
    """SIGTERM as soon as the recorder has its file, while the real default model is still
    being set up and before the window or the server exist."""
    proc = start_prism(tmp_path, "--port", str(free_port()))
    try:
        wait_until(lambda: sessions(tmp_path) or proc.poll() is not None, 120, 0.005,
                   "the recording to be created")
        proc.send_signal(signal.SIGTERM)
        code, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert code == 0, err[-3000:]
    assert "Traceback" not in err and "no running event loop" not in err, err[-3000:]
    (path,) = sessions(tmp_path)
    assert read_session(path).requests == ()


def test_closing_the_window_while_the_model_loads(tmp_path, default_model):
    """The close button as the first thing a user does, the real default model loading."""
    proc = start_prism(tmp_path, "--no-server", "--quit-by", "close")
    try:
        wait_until(lambda: sessions(tmp_path) or proc.poll() is not None, 120, 0.005,
                   "the recording to be created")
        proc.send_signal(signal.SIGUSR1)
        code, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert code == 0, err[-3000:]
    assert "Traceback" not in err and "no running event loop" not in err, err[-3000:]
    assert STOPPED in err or read_session(sessions(tmp_path)[0]).requests == ()


def test_closing_the_window_mid_stream_records_the_cut_as_the_stop_s(tmp_path):
    """A stream the window's close cuts is recorded as cut by the stop (`cancelled_by`
    shutdown), as `prism serve` records it, not as its client's cancel."""
    import threading

    port = free_port()
    proc = start_prism(tmp_path, "--replay", str(DEMO), "--replay-speed", "0.1",
                       "--port", str(port), "--quit-by", "close")
    got: list[str] = []
    try:
        wait_until(lambda: served(port) or proc.poll() is not None, 60, 0.1, "the server")
        messages = read_session(DEMO).requests[0].request["messages"]
        body = {"model": "m", "stream": True, "messages": [
            {"role": m["role"], "content": m["content"]} for m in messages]}

        def stream() -> None:
            try:
                with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions",
                                  json=body, timeout=60) as r:
                    for line in r.iter_lines():
                        got.append(line)
            except httpx.HTTPError:
                pass

        t = threading.Thread(target=stream, daemon=True)
        t.start()
        wait_until(lambda: any('"content"' in line for line in got), 60, 0.05, "a chunk")
        proc.send_signal(signal.SIGUSR1)
        code, err = finish(proc)
        t.join(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert code == 0, err[-3000:]
    (path,) = sessions(tmp_path)
    (req,) = read_session(path).requests
    assert req.finish == "cancelled" and req.cancelled_by == "shutdown"
