"""engine/metrics.py: counters, request log, anomalies, series, live rate, threads, logging."""

from __future__ import annotations

import logging
import threading

import pytest

from engine.backends.base import Timings
from engine.metrics import SERIES, Metrics
from engine.parse.events import ANOMALY_KINDS


def _run(m: Metrics, rid: str, t0: float, n: int = 5, api: str = "openai") -> Timings:
    m.request_started(rid, api, "smol", 10, t=t0)
    for i in range(n):
        m.token(rid, t=t0 + 0.1 + i * 0.02)
    timings = Timings(0.0, 50.0, 100.0, 80.0, 10, 2, n)
    m.request_finished(rid, "stop", timings, t=t0 + 0.1 + n * 0.02)
    return timings


def test_counts_and_newest_first() -> None:
    m = Metrics()
    _run(m, "a", 1.0)
    _run(m, "b", 2.0, n=3, api="anthropic")
    snap = m.snapshot(t=10.0)
    assert list(snap) == ["engine", "live", "requests", "totals"]
    assert [r["id"] for r in snap["requests"]] == ["b", "a"]
    b = snap["requests"][0]
    assert b["api"] == "anthropic" and b["model"] == "smol"
    assert b["state"] == "done" and b["finish_reason"] == "stop"
    assert b["output_tokens"] == 3 and b["prompt_tokens"] == 10
    assert b["ttft_ms"] == 100.0
    assert b["tokens_per_s"] == pytest.approx(3 * 1000 / 80)
    tot = snap["totals"]
    assert tot["requests"] == 2 and tot["finished"] == 2
    assert tot["prompt_tokens"] == 20 and tot["output_tokens"] == 8
    assert tot["cached_tokens"] == 4
    assert tot["prompt_ms"] == 100.0 and tot["decode_ms"] == 160.0
    assert tot["finish_reasons"] == {"stop": 2}
    assert tot["anomalies"] == dict.fromkeys(ANOMALY_KINDS, 0)
    assert tot["implicit_reasoning_ends"] == 0


def test_prompt_tokens_by_source_add_up() -> None:
    """Issue 20: each finished prompt is split into slot, disk and computed tokens; the request
    log says how many were reused and how many of those came from disk."""
    m = Metrics()
    for rid, t in (("a", Timings(prompt_tokens=100, cached_tokens=80, disk_tokens=30)),
                   ("b", Timings(prompt_tokens=50, cached_tokens=0)),
                   ("c", Timings(prompt_tokens=40, cached_tokens=40, disk_tokens=40))):
        m.request_started(rid, "openai", "smol", t.prompt_tokens, t=1.0)
        m.request_finished(rid, "stop", t, t=2.0)
    snap = m.snapshot(t=3.0)
    by_source = snap["totals"]["prompt_tokens_by_source"]
    assert by_source == {"slot": 50, "disk": 70, "computed": 70}
    assert sum(by_source.values()) == snap["totals"]["prompt_tokens"] == 190
    assert by_source["slot"] + by_source["disk"] == snap["totals"]["cached_tokens"]
    by_source["slot"] = -1  # a copy: the next snapshot is not affected
    assert m.snapshot()["totals"]["prompt_tokens_by_source"]["slot"] == 50
    a = snap["requests"][-1]
    assert (a["id"], a["cached_tokens"], a["disk_tokens"]) == ("a", 80, 30)


def test_speculation_is_counted_per_request_and_in_totals() -> None:
    """Issue 23: draft tokens verified and kept, per request and summed."""
    m = Metrics()
    for rid, t in (("a", Timings(output_tokens=100, draft_tokens=60, accepted_tokens=45)),
                   ("b", Timings(output_tokens=10))):
        m.request_started(rid, "openai", "smol", 5, t=1.0)
        m.request_finished(rid, "stop", t, t=2.0)
    snap = m.snapshot(t=3.0)
    assert (snap["totals"]["draft_tokens"], snap["totals"]["accepted_tokens"]) == (60, 45)
    a = next(r for r in snap["requests"] if r["id"] == "a")
    assert (a["draft_tokens"], a["accepted_tokens"]) == (60, 45)
    assert Timings(draft_tokens=60, accepted_tokens=45).acceptance == 0.75
    assert Timings().acceptance == 0.0
    # 100 tokens in 55 steps of its own (45 came with a step, as kept drafts).
    assert a["tokens_per_step"] == pytest.approx(100 / 55)
    b = next(r for r in snap["requests"] if r["id"] == "b")
    assert b["tokens_per_step"] == 1.0
    # The chart's series: one point for the request that drafted, none for the other.
    assert m.series()["draft_kept_pct"] == [(pytest.approx(2.0 - m.t0), 75.0)]


def test_request_log_is_bounded() -> None:
    m = Metrics(max_requests=3)
    for i in range(5):
        _run(m, f"r{i}", float(i), n=1)
    snap = m.snapshot()
    assert [r["id"] for r in snap["requests"]] == ["r4", "r3", "r2"]
    assert snap["totals"]["requests"] == 5


def test_running_request_state() -> None:
    m = Metrics()
    m.request_started("x", "gui", "smol", 4, t=1.0)
    assert m.snapshot(t=1.0)["requests"][0]["state"] == "prompt"
    m.token("x", t=1.3)
    snap = m.snapshot(t=1.3)
    assert snap["requests"][0]["state"] == "generating"
    assert snap["requests"][0]["ttft_ms"] == pytest.approx(300.0)
    assert snap["live"]["generating"] == ["x"]
    assert snap["live"]["in_flight"] == 1


def test_anomalies_per_request_and_totals(caplog: pytest.LogCaptureFixture) -> None:
    m = Metrics()
    m.request_started("a", "openai", "smol", 3, t=0.0)
    m.request_started("b", "openai", "smol", 3, t=0.0)
    tail = "let me call the tool now\n" * 5
    with caplog.at_level(logging.INFO, logger="prism"):
        m.anomaly("a", "implicit_reasoning_end", tail, t=0.5)
        m.anomaly("a", "stray_think_end", t=0.6)
        m.anomaly("b", "stray_think_end", t=0.7)
        m.request_finished("a", "tool_calls", Timings(output_tokens=4, decode_ms=10), t=1.0)
    snap = m.snapshot()
    a, b = snap["requests"][1], snap["requests"][0]
    assert a["anomalies"]["implicit_reasoning_end"] == 1
    assert a["implicit_reasoning_ends"] == 1
    assert a["anomalies"]["stray_think_end"] == 1
    assert b["anomalies"]["stray_think_end"] == 1 and b["implicit_reasoning_ends"] == 0
    tot = snap["totals"]
    assert tot["implicit_reasoning_ends"] == 1
    assert tot["anomalies"]["stray_think_end"] == 2
    lines = [r.getMessage() for r in caplog.records]
    implicit = [x for x in lines if "implicit end of thinking" in x]
    assert implicit == [
        "[prism] implicit end of thinking: a " + tail.replace("\n", "\\n")[:80] + "..."
    ]
    summary = [x for x in lines if x.startswith("[prism] a openai tool_calls")]
    assert summary and "prompt=3 out=4" in summary[0]
    assert "anomalies=implicit_reasoning_end=1,stray_think_end=1" in summary[0]


def test_repaired_call_is_counted_and_logged_with_its_repairs(
        caplog: pytest.LogCaptureFixture) -> None:
    m = Metrics()
    m.request_started("r", "openai", "smol", 3, t=0.0)
    with caplog.at_level(logging.INFO, logger="prism"):
        m.anomaly("r", "repaired_call", "missing </parameter>, Python literal", t=0.5)
        m.request_finished("r", "tool_calls", Timings(output_tokens=4, decode_ms=10), t=1.0)
    snap = m.snapshot()
    assert snap["requests"][0]["anomalies"]["repaired_call"] == 1
    assert snap["totals"]["anomalies"]["repaired_call"] == 1
    lines = [r.getMessage() for r in caplog.records]
    assert "[prism] repaired call: r missing </parameter>, Python literal" in lines
    assert any("anomalies=repaired_call=1" in x for x in lines)


def test_series() -> None:
    m = Metrics(sample_every=0.0)
    t0 = m.t0
    _run(m, "a", t0 + 1.0, n=4)
    m.anomaly("a", "malformed_call", t=t0 + 2.0)
    m.anomaly("a", "malformed_call", t=t0 + 3.0)
    m.sample(t=t0 + 10.0)
    s = m.series()
    assert set(s) == set(SERIES)
    assert s["ttft_ms"] == [(pytest.approx(1.18), 100.0)]
    assert s["anomalies.malformed_call"] == [(pytest.approx(2.0), 1.0), (pytest.approx(3.0), 2.0)]
    tps = s["tokens_per_s"]
    assert len(tps) == 5  # one per token (sample_every=0) and the explicit sample
    assert tps[-1] == (pytest.approx(10.0), 0.0)  # the window has emptied
    assert all(isinstance(x, float) for x, _ in tps)
    assert [v for _, v in s["queue_depth"]] == [0.0, 0.0, 0.0]


def test_live_tokens_per_s_window() -> None:
    m = Metrics(window=2.0)
    m.request_started("a", "openai", "smol", 1, t=0.0)
    for i in range(101):  # 50 tokens/s for 2 s
        m.token("a", t=1.0 + i * 0.02)
    assert m.snapshot(t=3.0)["live"]["tokens_per_s"] == pytest.approx(50.0, rel=0.03)
    assert m.snapshot(t=3.5)["live"]["tokens_per_s"] < 50.0  # decays once tokens stop
    assert m.snapshot(t=6.0)["live"]["tokens_per_s"] == 0.0


def test_queue_depth_from_engine() -> None:
    class FakeEngine:
        name, n_ctx, state = "fake", 512, "generating"

        def queue_depth(self) -> int:
            return 3

    m = Metrics(FakeEngine())
    snap = m.snapshot()
    assert snap["engine"] == {"model": "fake", "n_ctx": 512, "state": "generating"}
    assert snap["live"]["queue_depth"] == 3


def test_observers_and_a_failing_one(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[tuple] = []

    class Obs:
        def on_request_started(self, *a):
            seen.append(("start", *a))

        def on_token(self, rid, t, gap):
            seen.append(("token", rid, gap))

        def on_anomaly(self, *a):
            seen.append(("anomaly", *a))

        def on_request_finished(self, rid, reason, timings, latency):
            seen.append(("finish", rid, reason, latency))

    class Broken:
        def on_token(self, *a):
            raise RuntimeError("exporter down")

    m = Metrics()
    m.add_observer(Obs())
    m.add_observer(Broken())
    with caplog.at_level(logging.ERROR, logger="prism"):
        m.request_started("a", "openai", "smol", 2, t=0.0)
        m.token("a", t=0.5)
        m.token("a", t=0.75)
        m.anomaly("a", "unknown_tool", t=0.8)
        m.request_finished("a", "stop", Timings(output_tokens=2), t=1.0)
    assert seen == [
        ("start", "a", "openai", "smol", 2),
        ("token", "a", None),
        ("token", "a", 0.25),
        ("anomaly", "a", "unknown_tool"),
        ("finish", "a", "stop", 1.0),
    ]
    assert any(r.exc_info and "exporter down" in str(r.exc_info[1]) for r in caplog.records)


def test_thread_safety_smoke() -> None:
    m = Metrics(max_requests=1000)
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            for i in range(50):
                rid = f"{k}-{i}"
                m.request_started(rid, "openai", "smol", 1)
                for _ in range(10):
                    m.token(rid)
                m.anomaly(rid, "stray_think_end")
                m.request_finished(rid, "stop", Timings(output_tokens=10, decode_ms=1.0))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def reader() -> None:
        try:
            for _ in range(200):
                m.snapshot()
                m.series()
        except BaseException as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    tot = m.snapshot()["totals"]
    assert tot["requests"] == tot["finished"] == 200
    assert tot["output_tokens"] == 2000
    assert tot["anomalies"]["stray_think_end"] == 200
