"""engine/record/recording.py: round trip, flush per record, damaged and truncated files."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from engine.backends.base import Finish, Timings, Token
from engine.chat.request import ChatRequest, Message, Sampling
from engine.parse.events import ParseResult
from engine.parse.reading import Reading
from engine.record.reader import is_recording, load_recording, read_session
from engine.record.recording import (
    Recorder,
    RecordingError,
    default_session_path,
    request_from_dict,
    request_to_dict,
)

REQ = ChatRequest(
    messages=(Message("system", "be brief"), Message("user", "hi é 🙂")),
    tools=({"type": "function", "function": {"name": "f", "parameters": {}}},),
    sampling=Sampling(temperature=0.0, seed=7),
    max_tokens=16,
    stop=("END",),
)
TIMINGS = Timings(1.0, 2.0, 3.5, 40.0, 12, 4, 3)


def _write_one(rec: Recorder, rid: str = "r1", t0: float = 100.0) -> None:
    rec.request(
        rid,
        REQ,
        "<prompt>",
        start_state="reasoning",
        api="openai",
        family="hermes-json",
        stream_tools=False,
        tools=REQ.tools,
        t0=t0,
    )
    rec.token(rid, 0, Token(5, "Hel", t0 + 0.25))
    rec.token(rid, 1, Token(6, "lo 🙂", t0 + 0.5, (("lo", -0.1), ("la", -2.5))))
    rec.token(rid, 2, Token(7, "", t0 + 0.75))
    result = ParseResult("think", "Hello 🙂", (), "stop", {})
    rec.finish(rid, Finish("stop", TIMINGS), result)


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with Recorder(path, model="SmolLM2", pack="smollm2") as rec:
        _write_one(rec)
    session = read_session(path)
    assert session.header["format"] == "prism-session"
    assert session.header["version"] == 1
    assert session.model == "SmolLM2"
    assert session.header["pack"] == "smollm2"
    assert "T" in session.header["created"]
    (r,) = session.requests
    assert r.id == "r1"
    assert r.prompt == "<prompt>"
    assert r.start_state == "reasoning"
    assert r.api == "openai" and r.family == "hermes-json"
    assert r.stream_tools is False
    assert r.tools == REQ.tools
    assert r.text == "Hello 🙂"
    assert [t.id for t in r.tokens] == [5, 6, 7]
    assert [t.t for t in r.tokens] == [0.25, 0.5, 0.75]  # relative to the request's start
    assert r.tokens[1].top == (("lo", -0.1), ("la", -2.5))
    assert r.finish == "stop"
    assert r.timings == TIMINGS
    assert r.result is not None and r.result["content"] == "Hello 🙂"
    assert r.result["anomalies"]["implicit_reasoning_end"] == 0
    assert request_from_dict(r.request) == REQ
    assert request_to_dict(REQ) == r.request


def test_every_line_is_a_record(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with Recorder(path) as rec:
        _write_one(rec)
    lines = path.read_text(encoding="utf-8").splitlines()
    kinds = [json.loads(line).get("type") for line in lines]
    assert kinds == [None, "request", "token", "token", "token", "finish"]


def test_flushed_per_record_while_open(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    rec = Recorder(path, model="m")
    try:
        rec.request("a", {"messages": []}, "p", t0=1.0)
        rec.token("a", 0, Token(1, "x", 1.5))
        live = read_session(path)  # the writer is still open, nothing closed or flushed by us
        (r,) = live.requests
        assert r.text == "x"
        assert r.finish is None and r.timings is None
        rec.finish("a", Finish("error", Timings(), "boom"))
        assert read_session(path).requests[0].error == "boom"
    finally:
        rec.close()


def test_damaged_line_reports_line_number_and_partial(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with Recorder(path) as rec:
        _write_one(rec, "r1")
        _write_one(rec, "r2")
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[8] = "{not json\n"  # r2's second token
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(RecordingError, match=r"line 9") as info:
        read_session(path)
    assert info.value.line == 9
    partial = info.value.partial
    assert [r.id for r in partial.requests] == ["r1", "r2"]
    assert partial.requests[0].finish == "stop"
    assert partial.requests[1].text == "Hel" and partial.requests[1].finish is None
    assert read_session(path, strict=False) == partial


def test_truncated_last_line(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with Recorder(path) as rec:
        _write_one(rec)
    data = path.read_text(encoding="utf-8")
    path.write_text(data[: data.rindex('"timings"')], encoding="utf-8")  # killed mid-write
    with pytest.raises(RecordingError, match=r"line 6: truncated") as info:
        read_session(path)
    (r,) = info.value.partial.requests
    assert r.text == "Hello 🙂" and r.finish is None
    assert read_session(path, strict=False).requests == (r,)


@pytest.mark.parametrize(
    ("first_line", "message"),
    [
        ('{"format": "other", "version": 1}', "not a prism-session"),
        ('{"format": "prism-session", "version": 2}', "unsupported version 2"),
        ("[1, 2]", "not a JSON object"),
    ],
)
def test_bad_header(tmp_path: Path, first_line: str, message: str) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(first_line + "\n", encoding="utf-8")
    with pytest.raises(RecordingError, match=f"line 1: {message}") as info:
        read_session(path)
    assert info.value.partial.requests == ()


def test_empty_file_and_records_for_unknown_requests(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(RecordingError, match="line 1: empty"):
        read_session(empty)
    orphan = tmp_path / "orphan.jsonl"
    orphan.write_text(
        '{"format": "prism-session", "version": 1}\n'
        '{"type": "note", "text": "future record types are skipped"}\n'
        '{"type": "token", "id": "zz", "i": 0, "tok": 1, "text": "x", "t": 0}\n',
        encoding="utf-8",
    )
    with pytest.raises(RecordingError, match=r"line 3: bad token record: .*unknown request"):
        read_session(orphan)


def test_default_session_path() -> None:
    p = default_session_path()
    assert p.parent.name == "sessions"
    assert p.parent.parent.name == "prism"
    assert p.suffix == ".jsonl"


def test_default_path_never_clobbers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.record.recording as recording

    fixed = tmp_path / "sessions" / "20250101-120000.jsonl"
    monkeypatch.setattr(recording, "default_session_path", lambda: fixed)
    with Recorder() as a, Recorder() as b:
        assert a.path == fixed
        assert b.path == fixed.with_name("20250101-120000-2.jsonl")


def test_a_name_taken_between_check_and_open_is_not_clobbered(tmp_path: Path,
                                                               monkeypatch) -> None:
    """Two instances started in the same second race for one name (issue 10, item 4): the
    second must get a file of its own even when its check saw the name free."""
    import engine.record.recording as recording

    fixed = tmp_path / "sessions" / "20250101-120000.jsonl"
    monkeypatch.setattr(recording, "default_session_path", lambda: fixed)
    with Recorder() as a:
        _write_one(a)
        # as if the other instance created the file just after this one looked for it
        monkeypatch.setattr(Path, "exists", lambda self, **kw: False)
        with Recorder() as b:
            _write_one(b, "r2")
    monkeypatch.undo()
    assert a.path != b.path
    assert [r.id for r in read_session(a.path).requests] == ["r1"]
    assert [r.id for r in read_session(b.path).requests] == ["r2"]


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX permissions")
def test_recordings_are_private(tmp_path: Path, monkeypatch) -> None:
    import platformdirs

    monkeypatch.setattr(platformdirs, "user_data_dir", lambda name: str(tmp_path / name))
    old = os.umask(0o022)  # the usual umask, which left files 0644 and folders 0755
    try:
        with Recorder() as rec:
            _write_one(rec)
        explicit = tmp_path / "mine.jsonl"
        explicit.write_text("", encoding="utf-8")
        explicit.chmod(0o644)
        Recorder(explicit).close()
    finally:
        os.umask(old)
    assert rec.path.parent == tmp_path / "prism" / "sessions"
    assert stat.S_IMODE(rec.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(rec.path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(explicit.stat().st_mode) == 0o600


@pytest.mark.parametrize(("fields", "api", "family"), [
    ({"api": "anthropic", "family": "qwen-xml"}, "anthropic", "qwen-xml"),  # this version
    ({"api": "anthropic", "dialect": "qwen-xml"}, "anthropic", "qwen-xml"),  # family as dialect
    ({"dialect": "openai", "parser_dialect": "hermes-json"}, "openai", "hermes-json"),  # before
    ({"dialect": "qwen-xml"}, "responses", "qwen-xml"),  # earliest: dialect was the parser's
])
def test_older_files_name_the_client_and_the_family_differently(tmp_path: Path, fields, api,
                                                                 family) -> None:
    header = {"format": "prism-session", "version": 1, "model": "m", "pack": "p"}
    body = {"messages": [{"role": "user", "content": "hi"}], "dialect": "responses"}
    rec = {"type": "request", "id": "r1", "request": body, "prompt": "p", **fields}
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(header) + "\n" + json.dumps(rec) + "\n", encoding="utf-8")
    (r,) = read_session(path).requests
    assert (r.api, r.family) == (api, family)
    # The request body of those files names its client `dialect` too.
    assert request_from_dict(r.request).api == "responses"


def test_the_loader_tells_recordings_from_text_and_reads_past_damage(tmp_path: Path,
                                                                     caplog) -> None:
    path = tmp_path / "named-like-text.txt"  # recognised by its header, not its name
    with Recorder(path, model="m") as rec:
        _write_one(rec)
        rec.request("r2", REQ, "<prompt>", t0=200.0)
        rec.token("r2", 0, Token(9, "cut", 200.1))
    text = tmp_path / "out.jsonl"
    text.write_text('{"format": "something else"}\nplain words', encoding="utf-8")
    assert is_recording(path) and not is_recording(text)
    path.write_text(path.read_text(encoding="utf-8") + '{"type": "tok', encoding="utf-8")
    with caplog.at_level("WARNING", logger="prism"):
        session = load_recording(path)
    assert "truncated" in caplog.text
    first, cut = session.requests
    assert first.outcome == ("stop", None)
    assert cut.outcome == ("error", "the recording ends before this request finished")


# -- a request's reading (engine/parse/reading.py) --------------------------------------------


def test_a_request_is_recorded_with_its_reading(tmp_path: Path) -> None:
    reading = Reading(start="content", family="hermes-json", tools=REQ.tools,
                      tools_declared=True, stream_tools=True, one_call=True)
    path = tmp_path / "s.jsonl"
    with Recorder(path) as rec:
        # The reading wins over the separate fields, which are written from it.
        rec.request("r1", REQ, "<prompt>", start_state="reasoning", family="qwen-xml",
                    reading=reading, t0=0.0)
    line = json.loads(path.read_text(encoding="utf-8").splitlines()[1])
    assert line["reading"] == reading.to_dict()
    assert (line["start_state"], line["family"], line["stream_tools"]) == (
        "content", "hermes-json", True)  # for readers that predate readings
    assert line["tools"] == list(REQ.tools)
    (r,) = read_session(path).requests
    assert r.reading == reading
    assert (r.start_state, r.family, r.stream_tools, r.tools) == (
        "content", "hermes-json", True, REQ.tools)


@pytest.mark.parametrize(("body", "one_call", "as_text"), [
    ({"tools": [{"type": "function", "function": {"name": "f"}}], "parallel_calls": False},
     True, False),
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, False, False),
    ({"tools": [], "parallel_calls": False}, False, True),  # no tools: calls come back as text
])
def test_an_old_request_record_without_a_reading_still_loads(tmp_path: Path, body, one_call,
                                                             as_text) -> None:
    """A record written before `reading` existed: its reading is rebuilt from the fields and
    the request, as every player rebuilt it then."""
    header = {"format": "prism-session", "version": 1, "model": "m", "pack": "qwen3-xml"}
    rec = {"type": "request", "id": "r1", "t": 0.5,
           "request": {"messages": [{"role": "user", "content": "hi"}], **body},
           "prompt": "p", "start_state": "reasoning", "api": "openai", "dialect": "qwen-xml",
           "stream_tools": False, "tools": body["tools"]}
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(header) + "\n" + json.dumps(rec) + "\n", encoding="utf-8")
    (r,) = read_session(path).requests
    assert r.reading == Reading(start="reasoning", family="qwen-xml", tools=tuple(body["tools"]),
                                tools_declared=True, stream_tools=False, one_call=one_call,
                                calls_as_text=as_text)
    assert (r.start_state, r.family, r.stream_tools) == ("reasoning", "qwen-xml", False)


def test_the_demo_recording_loads_with_readings() -> None:
    from tests.support import DEMO

    requests = read_session(DEMO).requests
    assert requests and all(r.reading.family == r.family == "qwen-xml" for r in requests)
    assert all(r.reading.tools_declared and r.reading.start == r.start_state for r in requests)


def test_an_unknown_family_is_left_to_the_player(tmp_path: Path) -> None:
    """A family this version does not know (a newer file, or the oldest with none) reads as
    auto; `family` keeps the recorded name, so a player falls back to the pack's."""
    header = {"format": "prism-session", "version": 1}
    old = {"type": "request", "id": "a", "request": {"messages": []}, "prompt": "p"}
    new = {**old, "id": "b", "reading": {"family": "martian", "start": "content"}}
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in (header, old, new)), encoding="utf-8")
    a, b = read_session(path).requests
    assert (a.family, a.reading.family, a.reading.start) == ("", "auto", "content")
    assert (b.family, b.reading.family, b.reading.start) == ("martian", "martian", "content")


def test_a_damaged_reading_is_damage(tmp_path: Path) -> None:
    header = {"format": "prism-session", "version": 1}
    rec = {"type": "request", "id": "a", "request": {"messages": []}, "prompt": "p",
           "reading": {"tools": 5}}
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(header) + "\n" + json.dumps(rec) + "\n", encoding="utf-8")
    with pytest.raises(RecordingError, match="line 2: bad request record"):
        read_session(path)


def test_a_finish_keeps_where_the_cache_came_from_and_where_the_prompt_left_it(
        tmp_path: Path) -> None:
    """Issue 20: the slot, disk and computed shares of the prompt and the prefix match round
    trip; a finish recorded before them loads with none (0 from disk, no prefix)."""
    from engine.backends.base import PrefixMatch

    prefix = PrefixMatch(held=7012, source="disk", prompt_char=57, cached_text="10:31<|im_end|>",
                         prompt_text="10:32<|im_end|>")
    timings = Timings(prompt_tokens=7379, cached_tokens=7000, disk_tokens=6000)
    path = tmp_path / "s.jsonl"
    with Recorder(path) as rec:
        for rid, fin in (("a", Finish("stop", timings, prefix=prefix)),
                         ("b", Finish("stop", Timings(prompt_tokens=9)))):
            rec.request(rid, REQ, "<prompt>")
            rec.finish(rid, fin)
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    assert "prefix" not in lines[-1]  # nothing written where the engine gave none
    a, b = read_session(path).requests
    assert a.prefix == prefix and a.timings == timings
    assert (a.timings.slot_tokens, a.timings.disk_tokens, a.timings.computed_tokens) == (
        1000, 6000, 379)
    assert b.prefix is None
    # A finish written before disk_tokens existed.
    old = dict(lines[2])
    old["timings"] = {k: v for k, v in old["timings"].items() if k != "disk_tokens"}
    old.pop("prefix")
    path.write_text("\n".join(json.dumps(x) for x in (*lines[:2], old)) + "\n", encoding="utf-8")
    (a,) = read_session(path).requests
    assert a.prefix is None and a.timings.disk_tokens == 0 and a.timings.slot_tokens == 7000


def test_a_rerun_names_its_original_and_each_requests_counterpart(tmp_path: Path) -> None:
    """Issue 21: the header's `rerun_of`, a `counterpart` record per re-run request; a reader
    that predates the record type skips it, and a recording that is no rerun names none."""
    path = tmp_path / "rerun.jsonl"
    with Recorder(path, model="m", rerun_of="/recordings/orig.jsonl") as rec:
        for rid, of in (("n1", "o7"), ("n2", "")):
            rec.request(rid, REQ, "<prompt>")
            if of:
                rec.counterpart(rid, of)
            rec.finish(rid, Finish("stop", Timings()))
    s = read_session(path)
    assert s.rerun_of == "/recordings/orig.jsonl"
    assert [(r.id, r.counterpart) for r in s.requests] == [("n1", "o7"), ("n2", "")]
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    assert {"type": "counterpart", "id": "n1", "of": "o7"} in lines
    plain = tmp_path / "plain.jsonl"
    Recorder(plain, model="m").close()
    assert read_session(plain).rerun_of == "" and "rerun_of" not in plain.read_text("utf-8")
    # A counterpart for a request the file never had is damage, like any other record's.
    path.write_text(path.read_text(encoding="utf-8")
                    + json.dumps({"type": "counterpart", "id": "zz", "of": "o1"}) + "\n",
                    encoding="utf-8")
    with pytest.raises(RecordingError, match="unknown request"):
        read_session(path)


# Token texts a model writes that JSON must escape, or that look like the record's own syntax.
AWKWARD = ("plain", "", "\n", '"quoted"', "back\\slash", "tab\there", "\x00\x1f", "é🙂",
           "\u2028", '", "t": 9}', "\\u00e9", "}\n{")


def _token_lines(path: Path) -> list[dict]:
    """Every record json.loads reads from the file, line by line (the reference)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n")[1:-1]]


def test_token_records_read_as_json_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "awkward.jsonl"
    with Recorder(path, model="m") as rec:
        rec.request('id "with" \\ escapes', {"messages": []}, "")
        for i, text in enumerate(AWKWARD):
            rec.token('id "with" \\ escapes', i, Token(10 ** 12 + i, text, 100.0 + i * 1e-6,
                                                       top=(("x", -0.5),) if i == 3 else ()))
        rec.finish('id "with" \\ escapes', Finish("stop", TIMINGS))
    expected = [Token(r["tok"], r["text"], r["t"], tuple(map(tuple, r.get("top", ()))))
                for r in _token_lines(path) if r["type"] == "token"]
    (got,) = read_session(path).requests
    assert list(got.tokens) == expected and got.text == "".join(AWKWARD)
    (light,) = read_session(path, tokens=False).requests
    assert light.tokens == () and light.text == got.text
    assert (light.summary.n, light.summary.first_t, light.summary.last_t) == \
        (len(expected), expected[0].t, expected[-1].t)


@pytest.mark.parametrize("tokens", [True, False])
def test_a_token_record_that_does_not_fit_is_still_damage(tmp_path: Path, tokens) -> None:
    path = tmp_path / "bad.jsonl"
    with Recorder(path, model="m") as rec:
        _write_one(rec)
    lines = path.read_text(encoding="utf-8").splitlines()
    # In the recorder's layout but for a request the file never named: damage at its line.
    lines.insert(3, '{"type": "token", "id": "nobody", "i": 0, "tok": 1, "text": "x", "t": 0.5}')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(RecordingError) as err:
        read_session(path, tokens=tokens)
    assert err.value.line == 4 and "unknown request 'nobody'" in str(err.value)
    # A token id that is not a number: damage too, in either reading.
    lines[3] = lines[2].replace('"tok": ', '"tok": "x", "was": ')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(RecordingError) as err:
        read_session(path, tokens=tokens)
    assert err.value.line == 4


def test_a_guided_token_keeps_the_models_own_draw_and_others_stay_small(tmp_path: Path) -> None:
    path = tmp_path / "guided.jsonl"
    with Recorder(path, model="m") as rec:
        rec.request("r", {"messages": []}, "", t0=100.0)
        rec.token("r", 0, Token(1, '"units": "', 100.1))
        rec.token("r", 1, Token(2, "c", 100.2, guided="mi"))  # the grammar refused "mi"
        rec.token("r", 2, Token(3, "", 100.3, guided=""))  # an empty draw is still a mark
        rec.finish("r", Finish("stop", TIMINGS))
    lines = [r for r in _token_lines(path) if r["type"] == "token"]
    assert ["guided" in r for r in lines] == [False, True, True]  # only where the guard acted
    (r,) = read_session(path).requests
    assert [t.guided for t in r.tokens] == [None, "mi", ""]
    assert r.guided_tokens == 2
    (light,) = read_session(path, tokens=False).requests
    assert light.tokens == () and light.summary.guided == 2 and light.guided_tokens == 2
    assert light.text == r.text


def test_a_recording_from_before_the_guard_reads_without_marks(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    with Recorder(path, model="m") as rec:
        _write_one(rec)
    text = path.read_text(encoding="utf-8")
    assert '"guided"' not in text  # what an older Prism wrote, line for line
    for tokens in (True, False):
        (r,) = read_session(path, tokens=tokens).requests
        assert r.guided_tokens == 0 and all(t.guided is None for t in r.tokens)
