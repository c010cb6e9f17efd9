"""engine/record/index.py: each request's offset in its recording, and one request read back
from it, against the whole-file reader (`read_session`) as the oracle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.backends.base import Finish, Timings, Token
from engine.record.index import Home, RecordingIndex, index_of, load_home
from engine.record.reader import read_session
from engine.record.recording import Recorder, RecordingError


def _interleaved(path: Path) -> Recorder:
    """Three requests served in parallel (their lines interleave), one with an id that JSON
    escapes, non-ASCII text, alternatives and a guided token; the third has no finish yet."""
    rec = Recorder(path, model="m", pack="qwen3-xml")
    ids = ("a-1", 'b"2\\é', "c-3")
    for n, rid in enumerate(ids):
        rec.request(rid, {"messages": [{"role": "user", "content": f"ask {n} «é»"}]},
                    f"<prompt {n}>", start_state="content", family="qwen-xml", t0=float(n))
    for i in range(5):
        for n, rid in enumerate(ids):
            top = (("x", -0.5), ("y", -1.5)) if i == 2 else ()
            rec.token(rid, i, Token(100 * n + i, f"{rid}·{i} ", n + 0.1 * i, top,
                                    "drew" if i == 3 else None))
    rec.finish(ids[1], Finish("stop", Timings(output_tokens=5)), {"content": "x"})
    rec.finish(ids[0], Finish("length", Timings(output_tokens=5)))
    return rec


def test_the_recorder_and_a_scan_find_the_same_offsets_and_read_each_request_whole(tmp_path):
    path = tmp_path / "s.jsonl"
    rec = _interleaved(path)
    rec.close()
    scanned = RecordingIndex(path)
    assert scanned.scan() == 3
    whole = read_session(path).requests
    for want in whole:
        at = scanned.offset(want.id)
        assert at == rec.offsets[want.id]
        with path.open("rb") as f:  # the offset is the request record's first byte
            f.seek(at)
            assert json.loads(f.readline())["id"] == want.id
        assert scanned.load(want.id) == want
        assert RecordingIndex(path, rec.offsets).load(want.id) == want
    assert whole[2].finish is None  # read to the end of the file, as the whole reader does
    assert scanned.load("nope") is None


def test_a_file_still_being_written_is_scanned_on_from_its_last_whole_line(tmp_path):
    path = tmp_path / "live.jsonl"
    rec = Recorder(path, model="m")
    rec.request("r1", {"messages": []}, "p1")
    ix = RecordingIndex(path)
    assert ix.scan() == 1
    rec.request("r2", {"messages": []}, "p2")
    rec.token("r2", 0, Token(7, "hi", 0.1))
    rec.finish("r2", Finish("stop", Timings(output_tokens=1)))
    # Half a request line, as a reader may catch the writer: not indexed until it is whole.
    with path.open("a", encoding="utf-8") as f:
        f.write('{"type": "request", "id": "r3", "request": {}, "pro')
    assert ix.load("r2") == read_session(path, strict=False).requests[1]
    assert ix.offset("r3") is None
    with path.open("a", encoding="utf-8") as f:
        f.write('mpt": "p3"}\n')
    assert ix.load("r3").prompt == "p3"
    rec.close()


def test_request_lines_laid_out_otherwise_are_found_by_decoding_them(tmp_path):
    path = tmp_path / "other.jsonl"
    lines = [{"format": "prism-session", "version": 1},
             {"id": "x", "type": "request", "request": {}, "prompt": "px"},
             {"type": "token", "id": "x", "i": 0, "tok": 1, "text": "ok", "t": 0.1},
             {"type": "request", "id": "y", "request": {}, "prompt": "py"},  # written compact
             {"type": "finish", "id": "x", "reason": "stop", "timings": {}, "result": None}]
    path.write_text("".join(json.dumps(r, separators=(",", ":") if r.get("id") == "y"
                                       else (", ", ": ")) + "\n" for r in lines),
                    encoding="utf-8")
    ix = RecordingIndex(path)
    assert ix.scan() == 0  # none in the recorder's layout
    assert ix.load("x") == read_session(path).requests[0]
    assert ix.load("y").prompt == "py" and len(ix) == 2


def test_a_file_written_anew_is_indexed_anew(tmp_path):
    path = tmp_path / "again.jsonl"
    with Recorder(path) as rec:
        rec.request("first", {"messages": []}, "a long prompt " * 20)
        rec.request("second", {"messages": []}, "p")
    ix = index_of(path)
    assert ix.load("second").prompt == "p"
    with Recorder(path) as rec:  # the same path, overwritten: offsets moved
        rec.request("second", {"messages": []}, "q")
    assert ix.load("second").prompt == "q"
    assert load_home(Home(path, "second")).prompt == "q"


def test_a_damaged_line_of_the_request_is_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    with Recorder(path) as rec:
        rec.request("r", {"messages": []}, "p")
    with path.open("a", encoding="utf-8") as f:
        f.write('{"type": "token", "id": "r", "i": 0, "tok": "x"}\n')
    with pytest.raises(RecordingError, match="line 2"):
        RecordingIndex(path).load("r")


def test_lines_across_read_chunks_are_indexed_whole(tmp_path, monkeypatch):
    import engine.record.index as index

    path = tmp_path / "chunks.jsonl"
    rec = _interleaved(path)
    rec.close()
    for chunk in (7, 64, 333):  # lines longer than a chunk, and lines cut by one
        monkeypatch.setattr(index, "CHUNK", chunk)
        ix = RecordingIndex(path)
        assert ix.scan() == 3
        assert {r: ix.offset(r) for r in rec.offsets} == rec.offsets
