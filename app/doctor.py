"""The `prism doctor` verb: what a user pastes into a bug report.

    prism doctor [--port 8421]

Prints Prism's, Python's, llama-cpp-python's and Qt's versions, llama.cpp's system info and
whether this build can offload to a GPU (Metal/CUDA), the default model's path and size, the
machine's memory with the context and KV layout the default model would get, the data
directory, whether the server's port is free, and whether Qt's platform plugin for X11/XWayland
(xcb) can load: `ldd` on PySide6's own `libqxcb.so`, each library it cannot find named with
the Debian/Ubuntu package that brings it (a stock Debian lacks libxcb-cursor0, libxcb-icccm4
and libxcb-keysyms1, and the window then dies before it opens). llama.cpp's part comes from
the engine (engine/backends/llama/info.py: app/ never imports llama_cpp). Nothing is loaded
beyond llama_cpp itself (no model, no window); a part that fails says so on its line and the
rest still prints.
Runs on the main thread.
"""

from __future__ import annotations

import argparse
import platform
import re
import shutil
import socket
import subprocess
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


# Libraries Qt's xcb plugin links to, and the Debian/Ubuntu package of each.
XCB_PACKAGES = {
    "libxcb-cursor.so.0": "libxcb-cursor0", "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1", "libxcb-image.so.0": "libxcb-image0",
    "libxcb-render-util.so.0": "libxcb-render-util0", "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-shape.so.0": "libxcb-shape0", "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-xkb.so.1": "libxcb-xkb1", "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-render.so.0": "libxcb-render0", "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-xinerama.so.0": "libxcb-xinerama0", "libxcb-xinput.so.0": "libxcb-xinput0",
    "libxcb.so.1": "libxcb1", "libX11-xcb.so.1": "libx11-xcb1", "libX11.so.6": "libx11-6",
    "libxkbcommon.so.0": "libxkbcommon0", "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libSM.so.6": "libsm6", "libICE.so.6": "libice6", "libEGL.so.1": "libegl1",
    "libGL.so.1": "libgl1", "libOpenGL.so.0": "libopengl0", "libfontconfig.so.1":
    "libfontconfig1", "libfreetype.so.6": "libfreetype6", "libdbus-1.so.3": "libdbus-1-3",
    "libglib-2.0.so.0": "libglib2.0-0",
}
_NOT_FOUND = re.compile(r"^\s*(\S+) => not found", re.M)


def missing_libraries(ldd_output: str) -> list[str]:
    """The libraries `ldd` could not find, once each, in its order."""
    return list(dict.fromkeys(_NOT_FOUND.findall(ldd_output)))


def packages_for(libraries: list[str]) -> list[str]:
    """The Debian packages that bring `libraries` (a library not in the table: its name)."""
    return list(dict.fromkeys(XCB_PACKAGES.get(lib, lib) for lib in libraries))


def xcb_plugin():
    """PySide6's xcb platform plugin (None where it has none: macOS, Windows)."""
    from pathlib import Path

    import PySide6

    plugin = Path(PySide6.__file__).parent / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    return plugin if plugin.is_file() else None


def _qt_platform() -> list[tuple[str, str]]:
    plugin = xcb_plugin()
    if plugin is None or not sys.platform.startswith("linux"):
        return [("Qt platform", "xcb not checked (not Linux)")]
    if shutil.which("ldd") is None:
        return [("Qt platform", "xcb not checked (no ldd)")]
    out = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True,
                         timeout=30).stdout
    missing = missing_libraries(out)
    if not missing:
        return [("Qt platform", f"xcb loads: every library it needs is installed ({plugin})")]
    return [("Qt platform", f"xcb cannot load: missing {', '.join(missing)}; the window will "
             f"not open on X11. Install: sudo apt install {' '.join(packages_for(missing))}")]


def _model() -> list[tuple[str, str]]:
    """The default model, and the context and KV layout `prism serve` would give it (from its
    metadata and this machine's memory, engine/backends/llama/kv_plan.py: what decides speed and
    memory)."""
    from engine.backends.llama.kv_plan import memory_bytes, plan_context, plan_kv
    from engine.chat.packs import DEFAULT_PACK, load_pack

    pack = load_pack(DEFAULT_PACK)
    gguf = pack.gguf
    if gguf is None:
        return [("default model", "none")]
    plan = plan_context(gguf)
    kv = plan_kv(plan.n_ctx, DEFAULT_PARALLEL, plan.kv_per_token, plan.budget)
    layout = "one shared KV pool" if kv.unified else "a KV cache per sequence"
    return [("default model", f"{gguf} ({gguf.stat().st_size / 2**20:.0f} MiB)"),
            ("format", _format(pack)),
            ("memory", f"{memory_bytes() / 2**30:.1f} GiB"),
            ("default context", plan.describe()),
            (f"--parallel {DEFAULT_PARALLEL}", f"{layout}: {kv.reason}")]


def _format(pack) -> str:
    """The default pack's tool-call format, and what its template renders (the probe,
    engine/chat/probe.py: `prism probe` says more)."""
    from engine.chat.detect import detect, format_label

    found = detect(pack.template, pack.tool_template)
    v = found.verdict
    probed = (f"template renders {v.probe.format.describe()}" if v and v.probe.format
              else f"template probe: {v.why_unknown()}" if v and v.why_unknown() else "")
    label = format_label(pack.family, pack.format_unknown)
    return f"{label} ({pack.family_origin}{'; ' + probed if probed else ''})"


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
    for name, part in (("llama.cpp", _llama), ("Qt", _qt), ("Qt platform", _qt_platform),
                       ("default model", _model),
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
