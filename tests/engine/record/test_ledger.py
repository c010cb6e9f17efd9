"""engine/record/ledger.py: replies counted from recordings, grouped, rated, with medians.

The recordings are made the way Prism makes them: outputs whose anomalies are known are
replayed through a real `Service` with a `Recorder`, then the ledger reads the files alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.backends.base import Finish, Timings, Token
from engine.chat.packs import load_pack, resolve_pack
from engine.chat.request import ChatRequest, Message, Sampling
from engine.metrics import Metrics
from engine.record import ledger as ledger_module
from engine.record import verdict as v
from engine.record.ledger import KEYS, LISTED, kinds_of, ledger, read_replies, table
from engine.record.model_info import LOCAL, REPLAY, UNKNOWN, describe
from engine.record.recording import Recorder
from engine.record.replay import ReplayEngine
from engine.service import Service

TOOLS = ({"type": "function", "function": {
    "name": "get_weather", "description": "Weather by city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}},)
CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "</function>\n</tool_call>")
# (output, request options, its known anomalies, its known verdict); the Qwen3 template opens
# <think>, so each output starts in the reasoning.
CASES = [
    ("Thinking.\n</think>\n\nParis is sunny.", {}, {}, v.ANSWERED),
    ("ok\n</think>\n\n" + CALL, {}, {}, v.CALLED_TOOL),
    ("The user wants the weather.\n\n" + CALL, {}, {"implicit_reasoning_end": 1},
     v.CALL_FROM_REASONING),
    ("ok\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPar", {},
     {"unfinished_call": 1}, v.CALL_UNFINISHED),
    ("ok\n</think>\n\n<tool_call>\n<function=get_weather>\nsome prose\n</tool_call> after", {},
     {"malformed_call": 1}, v.CALL_MALFORMED),
    ("ok\n</think>\n\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>", {},
     {"unknown_tool": 1}, v.CALL_DROPPED),
    ("ok\n</think>\n\n" + CALL + "\n" + CALL, {"parallel_calls": False},
     {"extra_tool_call": 1}, v.CALL_DROPPED),
    ("ok\n</think>\n\nfine</think> done", {}, {"stray_think_end": 1}, v.ANSWERED),
    ("ok\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nA\n</parameter1>\n"
     "</function>\n</tool_call>", {}, {"repaired_call": 1}, v.CALLED_TOOL),
    ("a b c d e f g h i j k l m n o p", {"max_tokens": 3}, {}, v.LENGTH_IN_REASONING),
    ("ok\n</think>\n\nIt is sunny in Paris today.", {"stop": ("Paris",)}, {}, v.STOP_STRING),
]


def record(tmp_path: Path, name: str, cases=CASES, info: dict | None = None,
           upstream: str = "") -> Path:
    """Replay the cases' outputs through a real service, recording to `name`.jsonl."""
    outputs = []
    for i, (text, *_rest) in enumerate(cases):
        p = tmp_path / f"{name}-{i}.txt"
        p.write_text(text, encoding="utf-8")
        outputs.append(p)
    pack = resolve_pack("qwen3-xml", require_model=False)
    engine = ReplayEngine(outputs, speed=0)
    path = tmp_path / f"{name}.jsonl"
    rec = Recorder(path, model=engine.name, pack=pack.name, upstream=upstream,
                   info=describe(pack, REPLAY).to_dict() if info is None else info)
    svc = Service(engine, pack, metrics=Metrics(engine), recorder=rec)
    try:
        for _text, kw, _anoms, _verdict in cases:
            svc.submit(ChatRequest(messages=(Message("user", "weather?"),), tools=TOOLS,
                                   **kw)).wait(5)
    finally:
        rec.close()
        engine.close()
    return path


def test_each_anomaly_kind_is_counted_exactly(tmp_path):
    path = record(tmp_path, "known")
    replies = read_replies([path])
    assert [r.anomalies for r in replies] == [c[2] for c in CASES]
    assert [r.verdict.kind for r in replies] == [c[3] for c in CASES]
    (row,) = ledger(replies)
    expected = dict.fromkeys(LISTED, 0)
    for _t, _kw, anoms, _v in CASES:
        for k, n in anoms.items():
            expected[k] += n
    assert row.anomalies == expected
    assert row.replies == len(CASES)
    assert row.per_1000("unknown_tool") == pytest.approx(1000 / len(CASES))
    # five replies hold a delivered call (the unknown tool's and the repaired one included)
    assert row.calls == 5 and row.finishes == {"stop": 5, "tool_calls": 5, "length": 1}
    assert row.verdicts[v.CALL_DROPPED] == 2 and row.verdicts[v.ANSWERED] == 2


def test_the_recorded_result_decides_the_kind_and_the_event_is_read_when_asked(tmp_path,
                                                                              monkeypatch):
    path = record(tmp_path, "lazy")
    parsed: list[str] = []
    real = ledger_module.reparse

    def counting(req, fallback="auto"):
        parsed.append(req.id)
        return real(req, fallback)

    monkeypatch.setattr(ledger_module, "reparse", counting)
    replies = read_replies([path])
    (row,) = ledger(replies)
    # Only the cut by max_tokens needs its events to be told (which channel it ended in).
    cut = [r.id for r, c in zip(replies, CASES, strict=True) if c[3] == v.LENGTH_IN_REASONING]
    assert parsed == cut
    assert sum(row.verdicts.values()) == len(CASES)
    # Asked for, each verdict is the re-parse's, and of the kind counted.
    assert [r.verdict.kind for r in replies] == [r.kind for r in replies] == \
        [c[3] for c in CASES]
    assert all(r.verdict.span is not None for r in replies)
    assert len(parsed) == len(CASES)


def test_the_deciding_event_is_the_one_named(tmp_path):
    replies = read_replies([record(tmp_path, "spans")])
    by_kind = {r.verdict.kind: r for r in replies}
    raw = CASES[2][0]  # the call written in the thinking: decided by the call, at its close
    a, b = by_kind[v.CALL_FROM_REASONING].verdict.span
    assert raw[a:b] and raw[a:b] in CALL and b == len(raw)
    raw = CASES[3][0]  # the unfinished call: decided where the call was given up
    a, _b = by_kind[v.CALL_UNFINISHED].verdict.span
    assert a >= raw.index("<tool_call>")
    stop = by_kind[v.STOP_STRING].verdict
    assert "'Paris'" in stop.detail
    extra = [r for r in replies if r.verdict.kind == v.CALL_DROPPED][1].verdict
    a, b = extra.span
    assert "extra_tool_call" in extra.detail and CASES[6][0][a:b].strip() == CALL


def test_the_figures_come_from_the_recorded_timings(tmp_path):
    path = tmp_path / "timed.jsonl"
    with Recorder(path, model="m", pack="qwen3-xml") as rec:
        for i, (ttft, decode, n) in enumerate(((100.0, 1000.0, 20), (300.0, 1000.0, 40),
                                               (200.0, 2000.0, 20))):
            rec.request(f"r{i}", {"messages": []}, "")
            rec.finish(f"r{i}", Finish("stop", Timings(ttft_ms=ttft, decode_ms=decode,
                                                       output_tokens=n)))
    (row,) = ledger(read_replies([path]))
    assert row.ttft_ms == 200.0 and row.tokens_per_s == 20.0


def test_a_kind_a_newer_prism_records_is_listed_too(tmp_path):
    path = tmp_path / "newer.jsonl"
    with Recorder(path, model="m", pack="qwen3-xml") as rec:
        rec.request("r0", {"messages": []}, "")
        rec.finish("r0", Finish("stop", Timings()),
                   {"content": "", "tool_calls": [], "finish_reason": "stop",
                    "anomalies": {"guided_token": 2, "unknown_tool": 0}})
    replies = read_replies([path])
    assert kinds_of(replies) == (*LISTED, "guided_token")
    (row,) = ledger(replies)
    assert row.anomalies["guided_token"] == 2 and row.per_1000("guided_token") == 2000.0
    assert any(label.startswith("guided_token") for label, _ in table([row]))


def test_guided_tokens_are_summed_and_rated_apart_from_the_anomalies(tmp_path):
    path = tmp_path / "guarded.jsonl"
    with Recorder(path, model="m", pack="smollm2") as rec:
        for rid, marks in (("r0", ("mi", None, "les", "x")), ("r1", (None, None))):
            rec.request(rid, {"messages": []}, "")
            for i, mark in enumerate(marks):
                rec.token(rid, i, Token(i, "ab", 0.1 * i, guided=mark))
            rec.finish(rid, Finish("stop", Timings(output_tokens=len(marks))))
    replies = read_replies([path])
    assert [r.guided for r in replies] == [3, 0]
    (row,) = ledger(replies)
    assert row.guided == 3 and row.guided_per_1000 == 1500.0
    assert "guided_token" not in row.anomalies  # a fact about the run, not the model's fault
    assert row.to_dict()["guided_tokens"] == 3
    assert row.to_dict()["guided_tokens_per_1000"] == 1500.0
    lines = dict(table([row]))
    assert lines["guided tokens"] == ["3"] and lines["guided tokens /1000"] == ["1500.0"]


def test_grouping_by_each_key(tmp_path, default_model):
    local = describe(load_pack("smollm2"), LOCAL).to_dict()
    assert local["file"] == default_model.name and local["family"] == "hermes-json"
    a = record(tmp_path, "a", CASES[:3])
    b = record(tmp_path, "b", CASES[3:5], info=local)
    c = record(tmp_path, "c", CASES[5:6], info={**local, "engine": "http://127.0.0.1:9/v1"},
               upstream="http://127.0.0.1:9/v1")
    replies = read_replies([a, b, c])
    qwen = describe(resolve_pack("qwen3-xml", require_model=False), REPLAY)
    expect = {
        "model": {qwen.file: 3, default_model.name: 3},
        "quant": {qwen.quant: 3, local["quant"]: 3},
        "template": {qwen.template: 3, local["template"]: 3},
        "engine": {REPLAY: 3, LOCAL: 2, "http://127.0.0.1:9/v1": 1},
        # the family is the request's own reading (qwen-xml), whatever the header says
        "family": {"qwen-xml": 6},
    }
    for key in KEYS:
        rows = ledger(replies, (key,))
        assert {r.group[key]: r.replies for r in rows} == expect[key], key
    assert len(ledger(replies)) == 3
    with pytest.raises(ValueError, match="cannot group by colour"):
        ledger(replies, ("colour",))


def test_an_older_recording_says_unknown(tmp_path):
    path = tmp_path / "old.jsonl"
    lines = [{"format": "prism-session", "version": 1, "model": "qwen", "pack": "qwen3-xml"},
             {"type": "request", "id": "r0", "t": 0, "request": {"messages": []}, "prompt": "",
              "start_state": "content", "family": "qwen-xml", "tools": []},
             {"type": "token", "id": "r0", "i": 0, "tok": 1, "text": "Hi.", "t": 0.25},
             {"type": "finish", "id": "r0", "reason": "stop", "timings": {}, "result": None}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    (r,) = read_replies([path])
    assert r.keys == {"model": "qwen", "quant": UNKNOWN, "family": "qwen-xml",
                      "template": UNKNOWN, "engine": UNKNOWN}
    assert r.verdict.kind == v.ANSWERED and r.ttft_ms == 250.0


def test_the_real_model_is_named_with_its_quant(tmp_path, default_model):
    """A recording of the real default model names its file and its quant from the GGUF."""
    from engine.backends.llama.engine import LlamaEngine

    pack = load_pack("smollm2")
    engine = LlamaEngine(default_model, n_ctx=512, n_threads=1)
    path = tmp_path / "real.jsonl"
    rec = Recorder(path, model=engine.name, pack=pack.name,
                   info=describe(pack, LOCAL).to_dict())
    try:
        svc = Service(engine, pack, metrics=Metrics(engine), recorder=rec)
        svc.submit(ChatRequest(messages=(Message("user", "Say hi."),), max_tokens=4,
                               sampling=Sampling(temperature=0.0))).wait(120)
    finally:
        rec.close()
        engine.close()
    (r,) = read_replies([path])
    # the file name says its quant too: the GGUF's general.file_type must agree with it
    assert r.keys["quant"] != UNKNOWN and r.keys["quant"] in default_model.name
    assert r.keys["model"] == default_model.name and r.keys["engine"] == LOCAL
    assert r.verdict.kind in (v.ANSWERED, v.LENGTH)
    assert r.ttft_ms is not None and r.ttft_ms > 0


def test_a_reply_the_reasoning_budget_closed_is_counted_as_such(tmp_path):
    """Read without its tokens, the ledger tells a reply whose thinking the budget closed (the
    recording's `forced` tokens) from one the model ended itself, as the window's verdict does
    from the events."""
    path = tmp_path / "budget.jsonl"
    result = {"reasoning": "Hmm", "content": "Yes.", "tool_calls": [], "anomalies": {}}
    with Recorder(path, model="m", pack="qwen3-xml") as rec:
        for rid, forced in (("closed", True), ("own", False)):
            rec.request(rid, {"messages": []}, "", start_state="reasoning")
            for i, text in enumerate(("Hmm", "\n</think>\n\n", "Yes.")):
                rec.token(rid, i, Token(i, text, 0.1 * i, forced=forced and i == 1))
            rec.finish(rid, Finish("stop", Timings(output_tokens=3)), result)
    closed, own = read_replies([path])
    assert closed.verdict.kind == v.BUDGET_CLOSED and own.verdict.kind == v.ANSWERED
    (row,) = ledger([closed, own])
    assert row.to_dict()["verdicts"][v.BUDGET_CLOSED] == 1
