"""engine/pipeline.py: one request's tokens through the parser, to metrics and a recorder."""

from __future__ import annotations

import logging

from engine.backends.base import Finish, Timings, Token
from engine.metrics import Metrics
from engine.parse.events import EXTRA_TOOL_CALL, Event, merge, result_of
from engine.parse.parser import OutputParser
from engine.parse.reading import Reading
from engine.pipeline import TokenPipeline
from engine.record.reader import read_session
from engine.record.recording import Recorder
from tests.support import Clock

PIECES = ["The user wants", " the weather.\n<tool", "_call>\n<function=get_weather>\n",
          "<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"]


def parser() -> OutputParser:
    return OutputParser(start="reasoning", family="qwen-xml", stream_tools=False)


def test_without_reporting_it_is_the_parser() -> None:
    pipe = TokenPipeline("r", parser())
    events = [ev for i, p in enumerate(PIECES) for ev in pipe.feed(Token(i, p, 0.0))]
    events += pipe.finish()
    p = parser()
    expected = [ev for piece in PIECES for ev in p.feed(piece)] + p.finish()
    key = [(e.kind, e.text, e.span, e.anomaly) for e in merge(events)]
    assert key == [(e.kind, e.text, e.span, e.anomaly) for e in merge(expected)]
    assert pipe.n_tokens == len(PIECES) and pipe.state == p.state


def test_counts_records_and_logs_what_it_parses(tmp_path, caplog) -> None:
    clock = Clock()
    metrics = Metrics()
    path = tmp_path / "s.jsonl"
    with Recorder(path) as rec:
        rec.request("r", {"messages": []}, "prompt", start_state="reasoning", t0=0.0)
        pipe = TokenPipeline("r", parser(), metrics=metrics, recorder=rec, clock=clock)
        pipe.start("openai", "model", 7)
        with caplog.at_level(logging.INFO, logger="prism"):
            events = []
            for i, piece in enumerate(PIECES):
                events += pipe.feed(Token(i, piece, 0.5 * (i + 1)), t=1000.0 + i)
            events += pipe.finish()
        result = result_of(events, "stop")
        fin = Finish("stop", Timings(prompt_tokens=7, output_tokens=len(PIECES)))
        pipe.finished(fin, result)
    snap = metrics.snapshot()
    (req,) = snap["requests"]
    assert req["output_tokens"] == len(PIECES) and req["finish_reason"] == "tool_calls"
    assert req["anomalies"]["implicit_reasoning_end"] == 1
    # the log line shows the reasoning that preceded the call, not the anomaly's own text
    assert "implicit end of thinking: r The user wants the weather." in caplog.text
    (recorded,) = read_session(path).requests
    assert [t.text for t in recorded.tokens] == PIECES
    assert [t.t for t in recorded.tokens] == [0.5, 1.0, 1.5, 2.0]  # the token's own times
    assert recorded.finish == "stop"
    assert recorded.result["tool_calls"][0]["arguments"] == {"city": "Paris"}


class Upper:
    """A filter that upper-cases reasoning text and finishes with nothing."""

    def __init__(self, log: list) -> None:
        self.log = log

    def feed(self, events):
        self.log.append("upper")
        return [Event(e.kind, e.text.upper(), e.span) if e.kind == "reasoning" else e
                for e in events]

    def finish(self):
        return []


class Marks:
    """A filter that records the order it runs in and ends with one anomaly of its own."""

    def __init__(self, log: list) -> None:
        self.log = log

    def feed(self, events):
        self.log.append("marks")
        return list(events)

    def finish(self):
        return [Event("anomaly", "end", (0, 0), anomaly="x")]


def test_filters_run_after_the_parser_in_order() -> None:
    log: list = []
    pipe = TokenPipeline("r", parser(), filters=[Upper(log)])
    pipe.add_filter(Marks(log))
    pipe.add_filter(Marks(log), first=True)  # right after the parser, before the others
    events = [ev for i, p in enumerate(PIECES) for ev in pipe.feed(Token(i, p, 0.0))]
    events += pipe.finish()
    assert log[:3] == ["marks", "upper", "marks"]
    res = result_of(events)
    assert res.reasoning == "THE USER WANTS THE WEATHER." and res.anomalies["x"] == 2
    assert pipe.state == "content"  # the parser's own state: filters do not wrap it


def test_one_call_per_reply_through_the_pipeline() -> None:
    two = [*PIECES, "\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n"
           "</parameter>\n</function>\n</tool_call>"]
    reading = Reading(family="qwen-xml", one_call=True)
    pipe = TokenPipeline("r", reading.parser(), filters=reading.filters())
    events = [ev for i, p in enumerate(two) for ev in pipe.feed(Token(i, p, 0.0))]
    res = result_of(events + pipe.finish())
    assert [c.arguments for c in res.tool_calls] == [{"city": "Paris"}]
    assert res.anomalies[EXTRA_TOOL_CALL] == 1


CITY_AND_DAYS = ({"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"]}}},)


def test_a_declared_tool_checks_its_calls_and_the_metrics_log_it(caplog) -> None:
    # Issue 22: with the request's tools, a call that breaks its schema is counted and logged
    # as `invalid_arguments` (what failed, where); the call itself is the parser's.
    metrics = Metrics()
    reading = Reading(family="qwen-xml", tools=CITY_AND_DAYS, tools_declared=True)
    pipe = TokenPipeline("r", reading.parser(), metrics=metrics, filters=reading.filters(),
                         tools=reading.tools)
    pipe.start("openai", "model", 1)
    with caplog.at_level(logging.INFO, logger="prism"):
        events = [ev for i, p in enumerate(PIECES) for ev in pipe.feed(Token(i, p, 0.0))]
        events += pipe.finish()
    res = result_of(events)
    assert [c.arguments for c in res.tool_calls] == [{"city": "Paris"}]
    assert res.anomalies["invalid_arguments"] == 1
    assert metrics.snapshot()["totals"]["anomalies"]["invalid_arguments"] == 1
    assert "invalid arguments: r /days: 'days' is a required property" in caplog.text
    # The same output without the tools: nothing to check against.
    plain = TokenPipeline("r", reading.parser())
    events = [ev for i, p in enumerate(PIECES) for ev in plain.feed(Token(i, p, 0.0))]
    assert result_of(events + plain.finish()).anomalies["invalid_arguments"] == 0
