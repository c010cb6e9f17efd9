"""app/api/runs.py: what a client is answered from. A request that declared no tools (or
`tool_choice: "none"`) gets a call the model wrote anyway as text, in the channel it stood in,
through every API dialect, streamed and whole, with the official SDKs against a live replay
server; the run (the inspector's view) keeps the call and counts `unknown_tool` (issue 11)."""

from __future__ import annotations

import httpx
import pytest

from app.api.server import ServerThread
from app.api.state import AppState
from engine.backends.base import Finish, Timings
from engine.chat.packs import resolve_pack
from engine.parse.events import TOOL_CALL
from engine.record.replay import ReplayEngine
from engine.service import Service
from tests.app.conftest import TOOLS, xml_call
from tests.app.test_anthropic import blocks, streamed_and_whole
from tests.app.test_openai import collect, whole
from tests.app.test_responses import items, stream_final
from tests.app.test_server import recording_of

CALL = xml_call("get_weather", city="Paris")
IN_ANSWER = "Plan.\n</think>\n\nChecking.\n" + CALL + "\nDone."
IN_THINKING = "I need the weather.\n\n" + CALL
# (output, the client's reasoning, the client's content): the call verbatim where it stood
CASES = {
    "in_answer": (IN_ANSWER, "Plan.", "Checking.\n" + CALL + "\nDone."),
    "in_thinking": (IN_THINKING, IN_THINKING, ""),
    "bare_in_answer": ("Ok.\n</think>\n\n" + CALL[len("<tool_call>\n"):-len("\n</tool_call>")],
                       "Ok.", CALL[len("<tool_call>\n"):-len("\n</tool_call>")]),
}
ASK = [{"role": "user", "content": "Give this chat a title."}]


def _inspector_saw_an_unknown_call(live, n_runs: int) -> None:
    assert len(live.runs) == n_runs
    for run in live.runs:
        assert [e.call.name for e in run.events if e.kind == TOOL_CALL] == ["get_weather"]
        assert run.result.tool_calls and run.result.anomalies["unknown_tool"] == 1
    totals = live.service.metrics.snapshot()["totals"]["anomalies"]
    assert totals["unknown_tool"] == n_runs


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("choice", ["no_tools", "tool_choice_none"])
def test_openai_chat_gets_the_call_as_text(serve, name, choice):
    text, reasoning, content = CASES[name]
    live = serve(text)
    client = live.openai()
    kw = {} if choice == "no_tools" else {"tools": TOOLS, "tool_choice": "none"}
    streamed = collect(client.chat.completions.create(model="m", messages=ASK, stream=True,
                                                      **kw))
    resp = client.chat.completions.create(model="m", messages=ASK, **kw)
    for got in (streamed, whole(resp)):
        assert (got["reasoning"], got["content"]) == (reasoning, content)
        assert got["calls"] == {} and got["finish"] == "stop"
    assert resp.choices[0].message.tool_calls is None
    _inspector_saw_an_unknown_call(live, 2)


@pytest.mark.parametrize("name", sorted(CASES))
def test_anthropic_messages_get_the_call_as_text(serve, name):
    text, reasoning, content = CASES[name]
    live = serve(text)
    streamed, resp = streamed_and_whole(live.anthropic(), model="claude-any", max_tokens=1024,
                                        messages=ASK)
    assert blocks(streamed) == blocks(resp)
    want = [b for b in (("thinking", reasoning), ("text", content)) if b[1]]
    assert blocks(resp) == want
    assert resp.stop_reason == streamed.stop_reason == "end_turn"
    _inspector_saw_an_unknown_call(live, 2)


@pytest.mark.parametrize("name", sorted(CASES))
def test_responses_get_the_call_as_text(serve, name):
    text, reasoning, content = CASES[name]
    live = serve(text)
    client = live.openai()
    events = stream_final(client, model="m", input="Title?")
    resp = client.responses.create(model="m", input="Title?")
    want = [i for i in (("reasoning", reasoning), ("message", content)) if i[1]]
    assert items(events[-1].response.output) == items(resp.output) == want
    assert not [e for e in events if "function_call" in e.type]
    _inspector_saw_an_unknown_call(live, 2)


def test_declared_tools_still_get_the_call(serve):
    live = serve(IN_ANSWER)
    resp = live.openai().chat.completions.create(model="m", messages=ASK, tools=TOOLS)
    assert resp.choices[0].finish_reason == "tool_calls"
    assert resp.choices[0].message.content == "Checking.Done."
    assert live.last.result.anomalies["unknown_tool"] == 0


def test_unknown_tool_is_on_the_metrics_page(serve):
    live = serve(IN_ANSWER)
    live.openai().chat.completions.create(model="m", messages=ASK)
    page = live.http().get("/metrics").text
    line = next(x for x in page.splitlines()
                if x.startswith("prism_anomalies_total") and 'kind="unknown_tool"' in x)
    assert line.endswith(" 1.0")


# --- no local path in an error a client receives ---------------------------------------------


def _no_path_in(text: str, folder) -> None:
    assert str(folder) not in text and "/" + folder.name not in text, text


def test_a_replay_refusal_names_the_file_not_its_path(tmp_path):
    # The next output holds a call, so a request without tools is refused (as `prism serve
    # --replay` does by default): the refusal used to name the replay file's absolute path.

    out = tmp_path / "output0_0.txt"
    out.write_text(CALL, encoding="utf-8")
    engine = ReplayEngine([out], calls_need_tools=True)
    service = Service(engine, resolve_pack("qwen3-xml", require_model=False))
    with ServerThread(AppState(service=service)) as server:
        _refusals_name_no_path(server.url, tmp_path)
    engine.close()


def _refusals_name_no_path(url: str, tmp_path) -> None:
    http = httpx.Client(base_url=url, timeout=20)
    for path, body in (
        ("/v1/chat/completions", {"messages": ASK}),
        ("/v1/chat/completions", {"messages": ASK, "stream": True}),
        ("/v1/messages", {"model": "m", "max_tokens": 50, "messages": ASK}),
    ):
        r = http.post(path, json=body)
        assert r.status_code == 400, r.text
        _no_path_in(r.text, tmp_path)
        assert "replay: the next output (output0_0.txt) holds a tool call" in r.text
    http.close()


def test_an_engine_failure_naming_a_file_is_told_by_its_name(serve, tmp_path):
    # A run that ends with the engine's error (here replayed from a recording: a save that hit
    # a full disk) reaches the client, streamed or not, without the folder it names.

    error = f"OSError: [Errno 28] No space left on device: '{tmp_path}/cache/slot0.kv'"
    live = serve(recording_of(tmp_path / "failed.jsonl", Finish("error", Timings(), error)))
    http = live.http()
    whole_reply = http.post("/v1/chat/completions", json={"messages": [
        {"role": "user", "content": "hi"}]})
    assert whole_reply.status_code == 500
    _no_path_in(whole_reply.text, tmp_path)
    assert "No space left on device: 'slot0.kv'" in whole_reply.json()["error"]["message"]
    streamed = http.post("/v1/chat/completions", json={"messages": [
        {"role": "user", "content": "hi"}], "stream": True})
    assert "No space left on device: 'slot0.kv'" in streamed.text
    _no_path_in(streamed.text, tmp_path)
