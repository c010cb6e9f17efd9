"""What this llama.cpp build is: the versions and system info that `prism doctor` reports.

Owns `llama_info()` and `LlamaInfo`, so that nothing outside the engine imports `llama_cpp` (an
import-linter contract in pyproject.toml) just to describe it. Loads no model.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LlamaInfo:
    version: str  # llama-cpp-python's
    system_info: str  # llama.cpp's `llama_print_system_info()`: the CPU features, backends
    gpu_offload: bool  # a Metal or CUDA build, which can offload layers to a GPU


def llama_info() -> LlamaInfo:
    """Imports llama_cpp, with its log lines routed into logging first (log.py), so that
    llama.cpp's own start-up lines stay out of what the caller prints."""
    import llama_cpp

    from engine.backends.llama import log

    log.install()
    return LlamaInfo(
        version=llama_cpp.__version__,
        system_info=llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip(),
        gpu_offload=bool(llama_cpp.llama_supports_gpu_offload()),
    )
