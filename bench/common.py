"""What the server benchmarks share (bench/server.py, bench/concurrency.py): the repository
root, the sampling settings, a free port, waiting for a server to answer, and a process's peak
memory. Imported by scripts run as `python bench/NAME.py` (which put the root on sys.path);
runs on their main thread."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SAMPLING = {"temperature": 0.7, "top_p": 0.95, "top_k": 40, "min_p": 0.05,
            "repeat_penalty": 1.0}


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url}: the server exited ({proc.returncode})")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url}: not up after {timeout:.0f}s")
