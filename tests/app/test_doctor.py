"""app/doctor.py: `prism doctor` as a user runs it (a real subprocess): every line a bug report
needs, and a busy port said to be in use."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from app.doctor import XCB_PACKAGES, xcb_plugin

ROOT = Path(__file__).resolve().parents[2]


def doctor(*args: str) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-m", "app", "doctor", *args], cwd=ROOT, text=True,
                         capture_output=True, timeout=120, check=True).stdout
    rows = {}
    for line in out.splitlines():
        label, _, value = line.partition("  ")
        rows[label.strip()] = value.strip()
    return rows


def test_doctor_reports_what_a_bug_report_needs(default_model):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        rows = doctor("--port", str(port))
    assert rows["prism"] == metadata.version("prism-inspector")
    assert rows["python"].startswith(sys.version.split()[0])
    assert rows["llama-cpp-python"] == metadata.version("llama_cpp_python")
    assert rows["GPU offload"].startswith(("yes", "no"))
    assert "CPU :" in rows["llama.cpp system"]
    assert rows["Qt"] and rows["PySide6"]
    assert rows["default model"].startswith(str(default_model))
    assert rows["default model"].endswith(f"({default_model.stat().st_size / 2**20:.0f} MiB)")
    assert rows["memory"].endswith(" GiB")
    assert rows["default context"].startswith("context 8192 tokens, the model's trained context")
    assert rows["--parallel 4"].startswith(("a KV cache per sequence: 4 caches of 180 MiB",
                                            "one shared KV pool: 4 caches of 180 MiB"))
    assert rows["recordings"].endswith("sessions")
    assert rows[f"port {port}"].startswith("in use")


def test_a_free_port_is_free():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert doctor("--port", str(port))[f"port {port}"] == "free"


def test_the_engine_describes_its_llama_cpp_build():
    """What the doctor's llama.cpp lines come from (app/ never imports llama_cpp itself)."""
    import dataclasses

    from engine.backends.llama.info import LlamaInfo, llama_info

    info = llama_info()
    assert isinstance(info, LlamaInfo)
    assert info.version == metadata.version("llama_cpp_python")
    assert "CPU :" in info.system_info
    assert isinstance(info.gpu_offload, bool)
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.version = "0"  # type: ignore[misc]


@pytest.mark.skipif(xcb_plugin() is None or shutil.which("ldd") is None,
                    reason="PySide6 here has no xcb plugin, or there is no ldd: not Linux")
def test_the_doctor_names_the_libraries_qts_window_plugin_lacks():
    """ldd on PySide6's own xcb plugin, run here independently: each library it cannot find
    is named with the Debian package that brings it (or the plugin is said to load)."""
    plugin = xcb_plugin()
    out = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True).stdout
    missing = sorted({line.split()[0] for line in out.splitlines() if "not found" in line})
    row = doctor()["Qt platform"]
    if not missing:
        assert row.startswith("xcb loads")
    else:
        assert row.startswith("xcb cannot load: missing ")
        for lib in missing:
            assert lib in row and XCB_PACKAGES.get(lib, lib) in row.split("sudo apt install ")[1]


def test_the_missing_libraries_of_a_stock_debian_map_to_their_packages():
    """What ldd prints on a stock Debian 12 with PySide6 6.x (the three libraries the window
    needs before Qt starts), read as the doctor reads it."""
    from app.doctor import missing_libraries, packages_for

    ldd = ("\tlinux-vdso.so.1 (0x00007ffd)\n"
           "\tlibxcb-cursor.so.0 => not found\n"
           "\tlibxcb-icccm.so.4 => not found\n"
           "\tlibxcb.so.1 => /lib/x86_64-linux-gnu/libxcb.so.1 (0x00007f)\n"
           "\tlibxcb-keysyms.so.1 => not found\n"
           "\tlibxcb-icccm.so.4 => not found\n")
    missing = missing_libraries(ldd)
    assert missing == ["libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1"]
    assert packages_for(missing) == ["libxcb-cursor0", "libxcb-icccm4", "libxcb-keysyms1"]
