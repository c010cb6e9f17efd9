"""The disk cache's folder, format, index, deduplication, eviction and damage handling
(engine/backends/llama/disk_cache.py), with made-up state bytes: what llama.cpp does with real
ones is tests/engine/backends/llama/test_reuse.py."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.backends.llama import disk_cache as dc
from engine.backends.llama.disk_cache import DiskCache, common_prefix, fingerprint

NS = {"model": "m1", "kv": "unified"}


def state(n: int, seed: int = 1) -> bytes:
    return bytes((i * seed) % 251 for i in range(n))


def toks(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


@pytest.fixture
def cache(tmp_path: Path):
    c = DiskCache(tmp_path, NS, max_bytes=10 * 2**20)
    yield c
    c.close()


def saved(c: DiskCache, tokens: list[int], data: bytes) -> None:
    c.save(tokens, data)
    c.flush()


def test_common_prefix_finds_the_first_difference():
    a = toks(1000)
    for i in (0, 1, 499, 999):
        b = [*a[:i], -1, *a[i + 1:]]
        assert common_prefix(a, b) == i
    assert common_prefix(a, a[:300]) == 300
    assert common_prefix([], a) == 0


def test_a_saved_sequence_is_found_by_any_prompt_sharing_its_prefix(cache):
    saved(cache, toks(600), state(5000))
    entry, n = cache.best([*toks(400), 9999, 1])
    assert entry is not None and n == 400
    assert cache.read(entry) == bytearray(state(5000))
    assert cache.best([7, 7, 7])[1] == 0


def test_a_second_process_instance_sees_the_files_of_the_first(tmp_path):
    a = DiskCache(tmp_path, NS)
    saved(a, toks(600), state(100))
    b = DiskCache(tmp_path, NS)
    entry, n = b.best(toks(600))
    assert n == 600 and b.read(entry) == bytearray(state(100))
    a.close()
    b.close()


def test_another_namespace_lives_in_another_folder_and_sees_nothing(tmp_path):
    a = DiskCache(tmp_path, NS)
    saved(a, toks(600), state(100))
    other = DiskCache(tmp_path, {**NS, "model": "m2"})
    assert other.dir != a.dir and other.best(toks(600)) == (None, 0)
    a.close()
    other.close()


def test_a_foreign_file_planted_in_the_folder_is_skipped_and_kept(tmp_path, caplog):
    a = DiskCache(tmp_path, NS)
    other = DiskCache(tmp_path, {**NS, "model": "m2"})
    saved(other, toks(600), state(100))
    planted = a.dir / next(p.name for p in other.dir.glob("*.kv"))
    planted.write_bytes(next(other.dir.glob("*.kv")).read_bytes())
    with caplog.at_level(logging.WARNING, "prism"):
        assert a.best(toks(600)) == (None, 0)
    assert "foreign" in caplog.text and planted.exists()
    a.close()
    other.close()


def test_a_truncated_file_is_skipped_and_deleted(tmp_path, caplog):
    a = DiskCache(tmp_path, NS)
    saved(a, toks(600), state(4000))
    (f,) = a.dir.glob("*.kv")
    f.write_bytes(f.read_bytes()[:-100])
    b = DiskCache(tmp_path, NS)
    with caplog.at_level(logging.WARNING, "prism"):
        assert b.best(toks(600)) == (None, 0)
    assert "truncated" in caplog.text and not f.exists()
    a.close()
    b.close()


def test_a_corrupt_file_fails_its_digest_at_load_and_is_deleted(cache, caplog):
    saved(cache, toks(600), state(4000))
    (f,) = cache.dir.glob("*.kv")
    data = bytearray(f.read_bytes())
    data[-10] ^= 0xFF  # one flipped bit in the state: the size still matches
    f.write_bytes(bytes(data))
    entry, n = cache.best(toks(600))
    assert n == 600  # the header and tokens still read ...
    with caplog.at_level(logging.WARNING, "prism"):
        assert cache.read(entry) is None  # ... but the state is refused
    assert "corrupt" in caplog.text and not f.exists()
    assert cache.best(toks(600)) == (None, 0)


@pytest.mark.parametrize("junk", [b"", b"PRISMKV1", b"not a cache file", b"PRISMKV1\xff\xff"])
def test_junk_files_never_raise(tmp_path, junk, caplog):
    a = DiskCache(tmp_path, NS)
    (a.dir / "junk.kv").write_bytes(junk)
    with caplog.at_level(logging.WARNING, "prism"):
        assert a.best(toks(10)) == (None, 0)
    assert "skipped junk.kv" in caplog.text
    a.close()


def test_near_duplicates_are_not_saved_and_an_extended_entry_is_replaced(cache):
    assert not cache.worth_saving(toks(dc.SAVE_MIN - 1))  # too short to be worth a file
    saved(cache, toks(2000), state(100))
    # A new chat behind the same 2,000 tokens adding 100 of its own: not worth a second copy.
    assert not cache.worth_saving(toks(2000) + toks(100, 50_000))
    # One that adds a conversation's worth is, and it replaces the entry it extends.
    longer = toks(2000) + toks(600, 50_000)
    assert cache.worth_saving(longer)
    saved(cache, longer, state(200))
    assert len(cache) == 1 and cache.best(longer)[1] == len(longer)
    # A branch (shares 1,000, then differs) is kept beside it.
    branch = toks(1000) + toks(1500, 90_000)
    saved(cache, branch, state(300))
    assert len(cache) == 2


def test_eviction_drops_the_least_recently_used_down_to_the_size(tmp_path):
    c = DiskCache(tmp_path, NS, max_bytes=3 * 11_500)  # three entries of ~11.4 KB
    prompts = [toks(300, start=10_000 * i) for i in range(4)]
    for i, p in enumerate(prompts[:3]):
        saved(c, p, state(10_000, i + 1))
        t = 1_000_000 + i
        for f in c.dir.glob("*.kv"):  # mtimes one second apart, oldest first
            if f.stat().st_mtime > t:
                os.utime(f, (t, t))
    entry, _ = c.best(prompts[0])
    assert c.read(entry) is not None  # a load makes the oldest the most recent
    saved(c, prompts[3], state(10_000, 9))
    assert c.bytes_used <= c.max_bytes
    held = {i for i, p in enumerate(prompts) if c.best(p)[1] == 300}
    assert held == {0, 2, 3}  # 1 was least recently used
    c.close()


def test_fingerprint_tells_copies_alike_and_edits_apart(tmp_path):
    a = tmp_path / "a.gguf"
    a.write_bytes(os.urandom(dc.FINGERPRINT_BYTES * 3))
    b = tmp_path / "b.gguf"
    b.write_bytes(a.read_bytes())
    assert fingerprint(a) == fingerprint(b)
    data = bytearray(b.read_bytes())
    data[-1] ^= 1
    b.write_bytes(bytes(data))
    assert fingerprint(a) != fingerprint(b)


WRITER = """
import sys
from engine.backends.llama.disk_cache import DiskCache
c = DiskCache(sys.argv[1], {"model": "m1", "kv": "unified"})
me = int(sys.argv[2])
for i in range(20):
    base = list(range(1000)) if i % 2 else list(range(me * 100_000, me * 100_000 + 400))
    c.save(base + [me, i] * 200, bytes([me]) * 50_000)
c.close()
"""


def test_two_processes_writing_one_folder_leave_only_whole_files(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(k)],
                              cwd=Path(__file__).resolve().parents[4]) for k in (1, 2)]
    assert [p.wait(120) for p in procs] == [0, 0]
    c = DiskCache(tmp_path, NS, max_bytes=2**40)
    assert len(c) > 0 and c.skipped == 0
    assert not list(c.dir.glob("*.tmp-*"))  # every temporary file was renamed into place
    for f in c.dir.glob("*.kv"):
        entry, _n = c.best(c._read_header(f, f.stat().st_size).tokens)
        data = c.read(entry)
        assert data is not None and len(set(data)) == 1  # one writer's bytes, whole
    c.close()
