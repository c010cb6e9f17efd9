"""app/api/metrics.py: after known traffic in all three APIs, the JSON view
(`Metrics.snapshot()`) and the Prometheus text agree with each other and with what was sent."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.app.conftest import xml_call

CALL_IN_THINKING = "I need the weather.\n\n" + xml_call("get_weather", city="Paris")
STRAY = "Plan.\n</think>\n\nAnswer</think> goes on."
PLAIN = "Quick.\n</think>\n\nHello."
ASK = [{"role": "user", "content": "hi"}]


def samples(text: str) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]


def test_json_and_prometheus_after_known_traffic(serve):
    live = serve(CALL_IN_THINKING, STRAY, PLAIN)
    live.openai().chat.completions.create(model="m", messages=ASK, tools=WEATHER)
    with live.anthropic().messages.stream(model="m", max_tokens=100, messages=ASK) as s:
        for _ in s:
            pass
    live.openai().responses.create(model="m", input="hi")
    http = live.http()

    snap = http.get("/metrics", params={"format": "json"}).json()
    assert http.get("/metrics", headers={"Accept": "application/json"}).json()["totals"] \
        == snap["totals"]
    assert set(snap) == {"engine", "live", "requests", "totals"}
    totals = snap["totals"]
    out_tokens = sum(len(run.tokens) for run in live.runs)
    assert totals["requests"] == totals["finished"] == 3
    assert totals["implicit_reasoning_ends"] == 1
    assert totals["anomalies"]["implicit_reasoning_end"] == 1
    assert totals["anomalies"]["stray_think_end"] == 1
    assert totals["finish_reasons"] == {"tool_calls": 1, "stop": 2}
    assert totals["output_tokens"] == out_tokens
    assert totals["prompt_tokens"] == sum(run.prompt_tokens for run in live.runs)
    reqs = snap["requests"]  # newest first, each with its own counts
    assert [r["id"] for r in reqs] == [run.id for run in reversed(live.runs)]
    assert [r["api"] for r in reqs] == ["responses", "anthropic", "openai"]
    assert [r["implicit_reasoning_ends"] for r in reqs] == [0, 0, 1]
    assert [r["anomalies"]["stray_think_end"] for r in reqs] == [0, 1, 0]
    assert snap["live"]["queue_depth"] == 0

    r = http.get("/metrics")
    assert r.headers["content-type"].startswith("text/plain")
    m = samples(r.text)
    # The label is the id /v1/models reports (issue 9, item 8), not the engine's file name.
    model_id = live.http().get("/v1/models").json()["data"][0]["id"]
    assert model_id == "qwen3-xml" != live.service.engine.name
    model = (("model", model_id),)
    assert m[("prism_requests_started_total", model)] == 3
    assert m[("prism_requests_total", (("finish_reason", "stop"), *model))] == 2
    assert m[("prism_requests_total", (("finish_reason", "tool_calls"), *model))] == 1
    assert m[("prism_implicit_reasoning_ends_total", model)] == 1
    assert m[("prism_anomalies_total", (("kind", "stray_think_end"), *model))] == 1
    assert m[("prism_anomalies_total", (("kind", "implicit_reasoning_end"), *model))] == 1
    assert m[("prism_anomalies_total", (("kind", "malformed_call"), *model))] == 0
    assert m[("prism_output_tokens_total", model)] == out_tokens
    assert m[("prism_prompt_tokens_total", model)] == totals["prompt_tokens"]
    assert m[("prism_cached_tokens_total", model)] == 0
    assert m[("prism_time_to_first_token_seconds_count", model)] == 3
    assert m[("prism_request_latency_seconds_count", model)] == 3
    # One inter-token gap per token after each request's first.
    assert m[("prism_inter_token_latency_seconds_count", model)] == out_tokens - 3
    assert m[("prism_requests_running", model)] == m[("prism_requests_waiting", model)] == 0
    info = [k for k in m if k[0] == "prism_model_info"]
    assert len(info) == 1 and ("pack", "qwen3-xml") in info[0][1]
    labels = dict(info[0][1])
    # which model file the counts are for, named as `prism stats` names its groups (issue 21)
    from engine.record.model_info import REPLAY, describe

    expected = describe(live.service.pack, REPLAY, live.service.engine.name)
    assert {k: labels[k] for k in ("file", "quant", "family", "template", "engine")} == \
        expected.to_dict()
    assert labels["family"] == "qwen-xml" and labels["engine"] == REPLAY


def test_two_apps_keep_separate_registries(serve):
    a = serve(PLAIN)
    b = serve(PLAIN)
    a.openai().chat.completions.create(model="m", messages=ASK)
    ma = samples(a.http().get("/metrics").text)
    mb = samples(b.http().get("/metrics").text)
    model = (("model", "qwen3-xml"),)
    assert ma[("prism_request_latency_seconds_count", model)] == 1
    assert mb[("prism_request_latency_seconds_count", model)] == 0


def test_the_model_label_follows_model_name(serve):
    live = serve(PLAIN, model_name="my-model")
    live.openai().chat.completions.create(model="m", messages=ASK)
    assert live.http().get("/v1/models").json()["data"][0]["id"] == "my-model"
    m = samples(live.http().get("/metrics").text)
    assert m[("prism_request_latency_seconds_count", (("model", "my-model"),))] == 1


def test_repaired_calls_are_counted_by_kind(serve):
    # A missing </parameter> (issue 11): the call is accepted and `repaired_call` counted.
    repaired = "Go.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n" \
               "</function>\n</tool_call>"
    live = serve(repaired)
    resp = live.openai().chat.completions.create(model="m", messages=ASK, tools=WEATHER)
    assert resp.choices[0].message.tool_calls[0].function.arguments == '{"city": "Rome"}'
    http = live.http()
    assert http.get("/metrics", params={"format": "json"}).json()["totals"]["anomalies"][
        "repaired_call"] == 1
    m = samples(http.get("/metrics").text)
    kinds = {dict(k[1])["kind"]: v for k, v in m.items() if k[0] == "prism_anomalies_total"}
    assert kinds["repaired_call"] == 1 and kinds["unknown_tool"] == 0


def test_the_finish_counted_is_the_one_the_client_gets(serve):
    # No tools declared: the call goes to the client as text and the reply ends "stop", so the
    # metrics count "stop" (they used to count "tool_calls"); the recorded parse keeps the call.
    live = serve(CALL_IN_THINKING)
    resp = live.openai().chat.completions.create(model="m", messages=ASK)
    assert resp.choices[0].finish_reason == "stop" and not resp.choices[0].message.tool_calls
    snap = live.http().get("/metrics", params={"format": "json"}).json()
    assert snap["totals"]["finish_reasons"] == {"stop": 1}
    assert snap["requests"][0]["finish_reason"] == "stop"
    assert live.runs[0].result.finish_reason == "tool_calls"


UNITS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                   "units": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "days", "units"]}}}]
NO_UNITS = "Go.\n</think>\n\n" + xml_call("get_weather", city="Paris", days=3)


def test_a_call_that_breaks_its_schema_is_counted_and_still_sent(serve):
    # Issue 22: the call a small model writes without its required enum reaches the client as
    # written, streamed and whole, and /metrics counts it as `invalid_arguments`.
    live = serve(NO_UNITS, NO_UNITS)
    client = live.openai()
    resp = client.chat.completions.create(model="m", messages=ASK, tools=UNITS)
    (call,) = resp.choices[0].message.tool_calls
    assert (call.function.name, call.function.arguments) == (
        "get_weather", '{"city": "Paris", "days": 3}')
    streamed = "".join(
        tc.function.arguments or ""
        for chunk in client.chat.completions.create(model="m", messages=ASK, tools=UNITS,
                                                    stream=True)
        for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices)
    assert streamed == '{"city": "Paris", "days": 3}'
    http = live.http()
    snap = http.get("/metrics", params={"format": "json"}).json()
    assert snap["totals"]["anomalies"]["invalid_arguments"] == 2
    assert [r["anomalies"]["invalid_arguments"] for r in snap["requests"]] == [1, 1]
    m = samples(http.get("/metrics").text)
    kinds = {dict(k[1])["kind"]: v for k, v in m.items() if k[0] == "prism_anomalies_total"}
    assert kinds["invalid_arguments"] == 2 and kinds["unknown_tool"] == 0
    assert [run.result.anomalies["invalid_arguments"] for run in live.runs] == [1, 1]


def test_prompt_tokens_by_source_through_the_sdks(tmp_path):
    """Issue 20: /metrics splits the prompt tokens into slot, disk and computed, in the JSON
    view and the Prometheus text alike, beside the cached_tokens counter it keeps."""
    from engine.backends.base import PrefixMatch
    from engine.chat.packs import resolve_pack
    from engine.metrics import Metrics
    from engine.service import Service
    from tests.app.conftest import start_live
    from tests.caching_engine import CachingReplay

    (tmp_path / "out.txt").write_text("Hello.", encoding="utf-8")
    # Each prompt: 5 tokens reused, 3 of them from disk.
    engine = CachingReplay([tmp_path / "out.txt"], lambda prompt: (5, 3, PrefixMatch()))
    service = Service(engine, resolve_pack("qwen3-xml", require_model=False),
                      metrics=Metrics(engine))
    live = start_live(service)
    try:
        live.openai().chat.completions.create(model="m", messages=ASK)
        with live.anthropic().messages.stream(model="m", max_tokens=100, messages=ASK) as s:
            for _ in s:
                pass
        http = live.http()
        totals = http.get("/metrics", params={"format": "json"}).json()["totals"]
        prompt = sum(run.prompt_tokens for run in live.runs)
        assert totals["prompt_tokens_by_source"] == {"slot": 4, "disk": 6,
                                                     "computed": prompt - 10}
        m = samples(http.get("/metrics").text)
        model_id = http.get("/v1/models").json()["data"][0]["id"]
        for source, n in totals["prompt_tokens_by_source"].items():
            key = ("prism_prompt_tokens_by_source_total",
                   (("model", model_id), ("source", source)))
            assert m[key] == n
        assert m[("prism_cached_tokens_total", (("model", model_id),))] == 10
        assert m[("prism_prompt_tokens_total", (("model", model_id),))] == prompt
    finally:
        live.close()
        engine.close()
        live.thread.stop()
