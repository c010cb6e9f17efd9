"""The disk cache's folder as untrusted input (engine/backends/llama/disk_cache.py and
disk_files.py): headers of every wrong shape, FIFOs, directories and symlinks named `*.kv`, a
crashed writer's temporary files, a full disk, a writer stuck on a hung disk at close; each
planted before the cache opens and while it runs, and the cache still finds and saves. Made-up
state bytes here; the last test plants them under the real engine on the default model."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import struct
import subprocess
import threading
from pathlib import Path

import pytest

from engine.backends.llama import disk_files as df
from engine.backends.llama.disk_cache import DiskCache
from engine.backends.llama.engine import LlamaEngine
from tests.engine.backends.llama.test_disk_cache import NS, saved, state, toks
from tests.engine.backends.llama.test_engine import Collector, chatml

GOOD = {"namespace": "", "n_tokens": 2, "state_bytes": 3, "digest": "0badf00d"}
HEADERS = {
    "list": [], "string": "x", "null": None, "number": 7,
    "n_tokens null": {"n_tokens": None},
    "namespace int": {**GOOD, "namespace": 5},
    "n_tokens str": {**GOOD, "n_tokens": "2"},
    "n_tokens bool": {**GOOD, "n_tokens": True},
    "n_tokens negative": {**GOOD, "n_tokens": -1},
    "n_tokens list": {**GOOD, "n_tokens": [1, 2]},
    "state_bytes float": {**GOOD, "state_bytes": 3.0},
    "state_bytes dict": {**GOOD, "state_bytes": {}},
    "digest int": {**GOOD, "digest": 123},
    "digest not hex": {**GOOD, "digest": "zzzzzzzz"},
    "digest missing": {k: v for k, v in GOOD.items() if k != "digest"},
}


def planted_header(folder: Path, name: str, header: object, ns: str) -> Path:
    if isinstance(header, dict) and header.get("namespace") == "":
        header = {**header, "namespace": ns}  # ours in every other respect
    raw = json.dumps(header).encode()
    p = folder / name
    p.write_bytes(df.MAGIC + struct.pack("<I", len(raw)) + raw + b"\0" * 20)
    return p


def plant_specials(folder: Path) -> list[str]:
    os.mkfifo(folder / "x.kv")
    (folder / "y.kv").mkdir()
    (folder / "z.kv").symlink_to("/dev/zero")
    return ["x.kv", "y.kv", "z.kv"]


def works(c: DiskCache, n: int) -> None:
    """The cache still saves a new entry and finds it, and finds the one saved first."""
    fresh = toks(600, start=10_000 * n)
    saved(c, fresh, state(3000, n))
    entry, got = c.best(fresh)
    assert got == 600 and c.read(entry) == bytearray(state(3000, n))
    entry, got = c.best(toks(600))
    assert got == 600 and c.read(entry) == bytearray(state(3000))


def opened(tmp_path: Path, **kw) -> DiskCache:
    """A cache opened on another thread: a FIFO that blocks the open fails here, not hangs."""
    out: list[DiskCache] = []
    t = threading.Thread(target=lambda: out.append(DiskCache(tmp_path, NS, **kw)), daemon=True)
    t.start()
    t.join(60)
    assert out, "opening the cache did not return (blocked on a FIFO?) or raised"
    return out[0]


@pytest.mark.parametrize("header", list(HEADERS.values()), ids=list(HEADERS))
def test_a_header_of_the_wrong_shape_is_skipped_by_name(tmp_path, header, caplog):
    first = DiskCache(tmp_path, NS)
    saved(first, toks(600), state(3000))
    planted_header(first.dir, "before.kv", header, first.namespace)
    with caplog.at_level(logging.WARNING, "prism"):
        c = opened(tmp_path)  # at start: a bad file kept the engine from loading at all
        assert "skipped before.kv" in caplog.text
        planted_header(c.dir, "while.kv", header, c.namespace)
        works(c, 1)  # at lookup: a 500 for every request
    assert "skipped while.kv" in caplog.text
    assert (c.dir / "before.kv").exists() and (c.dir / "while.kv").exists()  # not ours
    first.close()
    c.close()


def test_fifos_directories_and_symlinks_are_never_opened(tmp_path, caplog):
    first = DiskCache(tmp_path, NS)
    saved(first, toks(600), state(3000))
    names = plant_specials(first.dir)
    with caplog.at_level(logging.WARNING, "prism"):
        c = opened(tmp_path)
        for name in names:
            assert f"skipped {name}: not a regular file" in caplog.text
        again = tmp_path / "again"
        c2 = DiskCache(again, NS)
        planted = plant_specials(c2.dir)  # while running: the FIFO hung every lookup
        done = threading.Event()
        threading.Thread(target=lambda: (saved(c2, toks(600), state(3000)), works(c2, 2),
                                         done.set()), daemon=True).start()
        assert done.wait(60), "a lookup blocked on the FIFO"
    for name in planted:
        assert caplog.text.count(f"skipped {name}") == 2  # once per cache, not per lookup
    assert (c2.dir / "x.kv").exists() and (c2.dir / "y.kv").is_dir()
    for cache in (first, c, c2):
        cache.close()


def test_an_indexed_file_swapped_for_a_fifo_is_a_miss_not_a_hang(tmp_path, caplog):
    c = DiskCache(tmp_path, NS)
    saved(c, toks(600), state(3000))
    entry, _ = c.best(toks(600))
    entry.path.unlink()
    os.mkfifo(entry.path)
    out: list[object] = []
    t = threading.Thread(target=lambda: out.append(c.read(entry)), daemon=True)
    t.start()
    t.join(60)
    assert out == [None]
    c.close()


def tmp_name(c: DiskCache, pid: int = 999_999) -> Path:
    return c.dir / f"{'ab' * 16}.kv{df.TMP_MARK}{pid}-1"


def test_a_crashed_writers_temporary_file_is_removed_and_never_loaded(tmp_path):
    first = DiskCache(tmp_path, NS)
    saved(first, toks(600), state(3000))
    (whole,) = first.dir.glob("*.kv")
    left = tmp_name(first)
    shutil.copy(whole, left)  # a whole file under a temporary name: still never loaded
    whole.unlink()
    foreign_tmp = first.dir / "notes.kv.tmp-1"  # not a name this cache writes: kept
    foreign_tmp.write_bytes(b"x")
    c = DiskCache(tmp_path, NS)  # at start, though it is seconds old, not an hour
    assert not left.exists() and foreign_tmp.exists()
    assert c.best(toks(600)) == (None, 0)
    shutil.copy(foreign_tmp, left)  # while running: at the next lookup
    c.best(toks(10))
    assert not left.exists()
    first.close()
    c.close()


def test_a_live_writers_temporary_file_is_kept(tmp_path):
    c = DiskCache(tmp_path, NS)
    live = tmp_name(c)
    fd = os.open(live, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    df.fcntl.flock(fd, df.fcntl.LOCK_EX | df.fcntl.LOCK_NB)  # as write_file holds it
    try:
        c.best(toks(10))
        other = DiskCache(tmp_path, NS)  # another process starting beside it
        assert live.exists()
    finally:
        os.close(fd)
    other.best(toks(10))
    assert not live.exists()  # its writer gone
    c.close()
    other.close()


def test_the_size_counts_files_it_did_not_write_and_deletes_only_its_own(tmp_path):
    c = DiskCache(tmp_path, NS, max_bytes=40_000)
    foreign = c.dir / "someone-elses.bin"
    foreign.write_bytes(b"f" * 20_000)
    for i in range(3):  # three entries of ~12.5 KB: two would fit beside nothing else
        saved(c, toks(300, start=10_000 * i), state(10_000, i + 1))
    assert foreign.exists() and c.bytes_used <= c.max_bytes
    assert len(c) == 1 and c.best(toks(300, start=20_000))[1] == 300  # the newest stayed
    c.close()


def test_cache_size_smaller_than_a_save_writes_nothing(tmp_path):
    c = DiskCache(tmp_path, NS, max_bytes=0)
    saved(c, toks(600), state(3000))
    assert list(c.dir.glob("*.kv*")) == [] and len(c) == 0
    c.close()


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 2 MiB tmpfs: a disk that really fills, while --cache-size (4G) never does."""
    where = tmp_path / "small"
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(reason=f"mounting a tmpfs needs root here: {r.stderr.strip()}")
    yield where
    subprocess.run(["umount", str(where)], check=True)


def test_a_full_disk_evicts_the_oldest_and_the_save_goes_through(small_disk, caplog):
    c = DiskCache(small_disk, NS)  # the default size, 4 GiB, never reached
    prompts = [toks(300, start=10_000 * i) for i in range(4)]
    with caplog.at_level(logging.INFO, "prism"):
        for i, p in enumerate(prompts):  # ~600 KB each: the fourth does not fit
            saved(c, p, state(600_000, i + 1))
    assert "disk full saving" in caplog.text and "Traceback" not in caplog.text
    assert "the disk is full" in caplog.text  # an eviction made the room
    assert not list(c.dir.glob(f"*{df.TMP_MARK}*"))
    assert c.best(prompts[0]) == (None, 0)  # the oldest went ...
    entry, n = c.best(prompts[3])  # ... and the last one was saved
    assert n == 300 and c.read(entry) == bytearray(state(600_000, 4))
    c.close()


def test_a_write_that_fails_twice_leaves_nothing_and_the_next_save_works(tmp_path,
                                                                          monkeypatch, caplog):
    c = DiskCache(tmp_path, NS)
    real_fsync = os.fsync

    def full(fd: int) -> None:  # a filesystem that reports ENOSPC at fsync (NFS, delalloc)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(df.os, "fsync", full)
    with caplog.at_level(logging.INFO, "prism"):
        saved(c, toks(600), state(3000))
    monkeypatch.setattr(df.os, "fsync", real_fsync)
    assert caplog.text.count("disk full saving") == 1  # retried once, not forever
    assert "could not save" in caplog.text and "Traceback" not in caplog.text
    assert list(c.dir.glob("*.kv*")) == []  # no temporary file, no half file
    works_later = toks(600, start=50_000)
    saved(c, works_later, state(3000))
    assert c.best(works_later)[1] == 600
    c.close()


def test_close_writes_the_queued_saves(tmp_path):
    c = DiskCache(tmp_path, NS)
    for i in range(3):
        c.save(toks(300, start=10_000 * i), state(50_000, i + 1))
    c.close()  # no flush first
    assert len(list(c.dir.glob("*.kv"))) == 3


def test_close_with_a_stuck_writer_returns_and_leaves_no_temporary_file(tmp_path,
                                                                         monkeypatch, caplog):
    c = DiskCache(tmp_path, NS)
    entered, release = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def hung(fd: int) -> None:  # a disk that stopped answering
        entered.set()
        release.wait()
        real_fsync(fd)

    monkeypatch.setattr(df.os, "fsync", hung)
    c.save(toks(600), state(300_000))
    c.save(toks(600, start=9_000), state(300_000, 2))  # queued behind it
    assert entered.wait(60)
    with caplog.at_level(logging.WARNING, "prism"):
        c.close(timeout=0.2)
    assert c._writer.is_alive() and not release.is_set()  # returned with the writer stuck
    assert "1 more dropped" in caplog.text
    assert list(c.dir.glob("*.kv*")) == []  # its temporary file removed by close
    release.set()
    c._writer.join(60)
    assert not c._writer.is_alive()
    assert list(c.dir.glob("*.kv*")) == []  # and the writer, unstuck, renamed nothing


@pytest.mark.model
def test_the_engine_serves_and_saves_beside_every_kind_of_bad_file(default_model, tmp_path,
                                                                   caplog):
    system = "You are a helpful assistant. " + " ".join(
        f"Fact {i}: the number {i} is {'even' if i % 2 == 0 else 'odd'}." for i in range(60))
    folder = tmp_path / "kv"
    engines: list[LlamaEngine] = []

    def serve(prompt: str) -> Collector:
        eng = engines[-1]
        c = Collector(prompt, max_tokens=4)
        eng.submit(c.job)
        assert c.wait(180).reason == "length", c.finish
        return c

    def start() -> LlamaEngine:
        eng = LlamaEngine(default_model, n_threads=1, n_ctx=2048, cache_dir=folder)
        engines.append(eng)
        assert eng.ready.wait(120) and eng.load_error is None, eng.load_error
        return eng

    try:
        with caplog.at_level(logging.INFO, "prism"):
            first = start()
            serve(chatml("Name a fruit.", system))
            first.close()
            ns = next(folder.glob("ns-*"))
            (good,) = ns.glob("*.kv")
            namespace = ns.name.removeprefix("ns-")
            bad = {f"{i}.kv": h for i, h in enumerate(HEADERS.values())}
            for name, header in bad.items():
                planted_header(ns, name, header, namespace)
            plant_specials(ns)
            shutil.copy(good, tmp_name_in(ns))
            again = start()  # was: "The model failed to load: AttributeError" every start
            c = serve(chatml("Name a fruit.", system))
            assert c.finish.timings.disk_tokens > 0  # the good file still loads beside them
            for name in (*bad, "x.kv", "y.kv", "z.kv"):
                assert f"skipped {name}" in caplog.text
            assert not tmp_name_in(ns).exists()
            os.mkfifo(ns / "late.kv")  # while running: was a hang of every later request
            planted_header(ns, "later.kv", [], namespace)
            serve(chatml("Say hello.", system.replace("Fact", "Note")))  # a new prefix
            again.close()
        assert "skipped late.kv" in caplog.text and "skipped later.kv" in caplog.text
        ours = [p for p in ns.glob("*.kv") if df.OWN_NAME.fullmatch(p.name)]
        assert len(ours) >= 2  # the second prompt was saved too
    finally:
        for eng in engines:
            eng.close()


def tmp_name_in(folder: Path) -> Path:
    return folder / f"{'cd' * 16}.kv{df.TMP_MARK}999999-1"
