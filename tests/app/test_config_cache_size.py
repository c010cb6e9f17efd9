"""app/config.py's --cache-size: 0 turns the disk prompt cache off (it read as "the default,
4 GiB"), on the real default model through `build_service`, as `prism serve` builds it."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from app import serve as serve_verb
from app.config import build_service, byte_size
from tests.engine.backends.llama.test_engine import Collector, chatml

pytestmark = pytest.mark.model


def test_cache_size_zero_writes_nothing(default_model: Path, tmp_path: Path):
    assert byte_size("0") == 0
    p = argparse.ArgumentParser()
    serve_verb.add_arguments(p)
    folder = tmp_path / "kv"
    service = build_service(p.parse_args([
        "--model", str(default_model), "--cache-dir", str(folder), "--cache-size", "0",
        "--no-record", "--n-ctx", "2048", "--threads", "1", "--parallel", "1"]))
    try:
        engine = service.engine
        assert engine.ready.wait(120) and engine.load_error is None
        long = chatml("Name a fruit.", " ".join(f"Fact {i} is true." for i in range(120)))
        c = Collector(long, max_tokens=4)
        engine.submit(c.job)
        fin = c.wait(180)
        assert fin.reason == "length" and fin.timings.prompt_tokens > 256  # worth a save
    finally:
        service.engine.close()  # a queued save would be written here
    assert not folder.exists() or list(folder.rglob("*.kv*")) == []
