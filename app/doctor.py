"""The `prism doctor` verb: what a user pastes into a bug report.

    prism doctor [--port 8421]

Prints Prism's, Python's, llama-cpp-python's and Qt's versions, llama.cpp's system info and
whether this build can offload to a GPU (Metal/CUDA), the default model's path and size, the
machine's memory with the context and KV layout the default model would get, the data
directory, and whether the server's port is free. llama.cpp's part comes from the engine
(engine/backends/llama/info.py: app/ never imports llama_cpp). Nothing is loaded beyond llama_cpp
itself (no model, no window); a part that fails says so on its line and the rest still prints.
Runs on the main thread.
"""

from __future__ import annotations

import argparse
import platform
import socket
import sys
from collections.abc import Callable
from importlib import metadata

from app.config import DEFAULT_PARALLEL, port_number


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=port_number, default=8421,
                   help="the port to check (default 8421)")


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _llama() -> list[tuple[str, str]]:
    from engine.backends.llama.info import llama_info

    info = llama_info()  # the engine's to ask: only engine/ imports llama_cpp
    return [("llama-cpp-python", info.version),
            ("GPU offload", "yes (Metal/CUDA build)" if info.gpu_offload
             else "no (a CPU-only build)"),
            ("llama.cpp system", info.system_info)]


def _qt() -> list[tuple[str, str]]:
    import PySide6
    from PySide6 import QtCore

    return [("PySide6", PySide6.__version__), ("Qt", QtCore.qVersion())]


def _model() -> list[tuple[str, str]]:
    """The default model, and the context and KV layout `prism serve` would give it (from its
    metadata and this machine's memory, engine/backends/llama/kv_plan.py: what decides speed and
    memory)."""
    from engine.backends.llama.kv_plan import memory_bytes, plan_context, plan_kv
    from engine.chat.packs import DEFAULT_PACK, load_pack

    gguf = load_pack(DEFAULT_PACK).gguf
    if gguf is None:
        return [("default model", "none")]
    plan = plan_context(gguf)
    kv = plan_kv(plan.n_ctx, DEFAULT_PARALLEL, plan.kv_per_token, plan.budget)
    layout = "one shared KV pool" if kv.unified else "a KV cache per sequence"
    return [("default model", f"{gguf} ({gguf.stat().st_size / 2**20:.0f} MiB)"),
            ("memory", f"{memory_bytes() / 2**30:.1f} GiB"),
            ("default context", plan.describe()),
            (f"--parallel {DEFAULT_PARALLEL}", f"{layout}: {kv.reason}")]


def _data_dir() -> list[tuple[str, str]]:
    from engine.record.recording import default_session_path

    return [("recordings", str(default_session_path().parent))]


def _port(port: int) -> Callable[[], list[tuple[str, str]]]:
    def check() -> list[tuple[str, str]]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError as e:
                return [(f"port {port}", f"in use ({e.strerror or e})")]
        return [(f"port {port}", "free")]

    return check


def report(port: int) -> list[tuple[str, str]]:
    """(label, value) lines; a section that fails gives one line saying why."""
    lines = [("prism", version("prism-inspector")),
             ("python", f"{sys.version.split()[0]} ({platform.platform()})")]
    for name, part in (("llama.cpp", _llama), ("Qt", _qt), ("default model", _model),
                       ("data", _data_dir), ("port", _port(port))):
        try:
            lines += part()
        except Exception as e:  # a broken part must not hide the others
            lines.append((name, f"error: {type(e).__name__}: {e}"))
    return lines


def run(args: argparse.Namespace) -> int:
    rows = report(args.port)
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    return 0
