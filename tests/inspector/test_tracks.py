"""inspector/tracks.py: tracks fill from run updates; old documents are released (memory)."""

from __future__ import annotations

import time

from engine.backends.base import Token
from engine.chat.request import ChatRequest, Message
from engine.parse.events import Event
from inspector.tracks import LiveFeed, Track, TrackStore


def finished_track(i: int, n_tokens: int = 50) -> Track:
    t = Track(id=f"r{i}", prompt="p" * 100)
    t.add_tokens(Token(k, "x", time.perf_counter()) for k in range(n_tokens))
    t.add_events([Event("content", "x" * n_tokens, (0, n_tokens))])
    t.finish("stop")
    return t


def test_old_documents_are_released_and_rows_bounded():
    store = TrackStore(max_rows=10, max_documents=3)
    running = Track(id="live")
    running.add_tokens([Token(1, "a", 0.0)])
    store.add(running)
    tracks = [finished_track(i) for i in range(12)]
    dropped = []
    for t in tracks:
        dropped += store.add(t)
    assert len(store) == 10
    assert [t.id for t in dropped] == ["live", "r0", "r1"]
    kept = [t for t in store if not t.released]
    assert [t.id for t in kept] == ["r9", "r10", "r11"]
    old = store.get("r5")
    assert old.released and old.tokens == [] and old.events == [] and old.prompt == ""
    assert old.finish_reason == "stop" and old.output_tokens == 0  # the row keeps its summary


def test_a_running_or_selected_track_keeps_its_document():
    store = TrackStore(max_documents=2)
    running = Track(id="live")
    running.add_tokens([Token(1, "a", 0.0)])
    store.add(running)
    selected = finished_track(0)
    store.add(selected)
    store.protected = selected
    for i in range(1, 6):
        store.add(finished_track(i))
    assert not running.released and not selected.released
    assert store.get("r1").released


def test_held_is_the_raw_text_past_the_last_event():
    t = Track(id="x", start_state="content")
    t.add_tokens([Token(1, "Hello <", 0.0), Token(2, "tool_c", 0.1)])
    t.add_events([Event("content", "Hello ", (0, 6))])
    assert t.raw == "Hello <tool_c" and t.held == "<tool_c"
    t.finish("stop")
    assert t.held == ""


class FakeService:
    def __init__(self) -> None:
        self.listeners = []
        self.metrics = None

    def add_listener(self, fn) -> None:
        self.listeners.append(fn)

    def remove_listener(self, fn) -> None:
        self.listeners.remove(fn)


def test_live_feed_only_enqueues_on_the_engine_thread():
    svc = FakeService()
    feed = LiveFeed(svc, TrackStore())
    assert feed.poll() == []
    feed.close()
    assert svc.listeners == []


CALL_IN_THINKING = ("The user wants the weather.\n<tool_call>\n<function=get_weather>\n"
                    "<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>")


def test_live_feed_fills_a_track_from_a_real_run(replay_service):
    svc = replay_service(CALL_IN_THINKING)
    store = TrackStore()
    feed = LiveFeed(svc, store)
    run = svc.submit(ChatRequest(messages=(Message("user", "Weather in Paris?"),), api="gui"))
    run.wait(5)
    assert feed.poll()  # everything queued on the engine thread is applied here
    track = store.get(run.id)
    assert (track.source, track.model, track.status) == ("gui", svc.engine.name, "done")
    assert track.metrics is svc.metrics is feed.metrics
    assert track.raw == CALL_IN_THINKING and track.events == run.events
    assert track.finish_reason == "tool_calls" == run.finish_reason
    assert track.anomalies["implicit_reasoning_end"] == 1
    assert feed.poll() == []  # nothing new
    feed.close()


def test_reparse_under_other_settings_and_a_stable_fixture():
    t = Track(id="x", start_state="reasoning", family="qwen-xml")
    t.add_tokens(Token(i, piece, 0.0) for i, piece in enumerate(
        ["The user wants", " the weather.\n<tool", "_call>\n<function=get_weather>\n",
         "<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"]))
    t.finish("stop")
    _, own = t.reparse()
    assert own.reasoning == "The user wants the weather." and own.finish_reason == "tool_calls"
    _, as_content = t.reparse(start="content")
    assert as_content.reasoning == "" and as_content.content == "The user wants the weather."
    assert as_content.anomalies["implicit_reasoning_end"] == 0
    fixture = t.fixture()
    assert fixture == t.fixture()  # call ids are fixed, so the fixture is stable
    assert fixture["chunks"] == [tok.text for tok in t.tokens]
    assert fixture["expected"]["tool_calls"][0]["arguments"] == {"city": "Paris"}


def test_a_request_whose_tools_were_not_shown_is_marked(replay_service):
    from engine.chat.template import ChatTemplate

    svc = replay_service("ok")
    svc.template = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}")
    feed = LiveFeed(svc, TrackStore())
    tool = {"type": "function", "function": {"name": "f", "parameters": {}}}
    run = svc.submit(ChatRequest(messages=(Message("user", "hi"),), tools=(tool,), api="gui"))
    run.wait(5)
    feed.poll()
    assert feed.store.get(run.id).notes == ("tools_ignored",)
    feed.close()


def test_live_feed_sees_a_slot_granted_between_updates(replay_service, monkeypatch):
    """An engine with slots sets `job.slot` when it takes the job, with no update: the next
    frame's poll shows the track in its slot (reading its prompt), the finish keeps it."""
    svc = replay_service("Hello there.")
    held = []
    submit = svc.engine.submit
    monkeypatch.setattr(svc.engine, "submit", held.append)  # waiting: every slot is busy
    feed = LiveFeed(svc, TrackStore())
    run = svc.submit(ChatRequest(messages=(Message("user", "hi"),), api="gui"))
    (track,) = feed.poll()
    assert (track.status, track.slot, track.in_prompt) == ("queued", -1, False)
    assert feed.poll() == []  # nothing changed
    held[0].slot = 3  # what engine/backends/llama/batch.py does when it admits the job
    assert feed.poll() == [track]
    assert (track.status, track.slot, track.in_prompt) == ("queued", 3, True)
    submit(held[0])  # the replay engine now plays it (and reports no slot of its own)
    run.wait(5)
    feed.poll()
    assert (track.status, track.slot, track.in_prompt) == ("done", 3, False)
    assert track.raw == "Hello there."
    feed.close()


# -- re-parse "as shown" under one call per reply (issue 18, item 4) -------------------------

TOOLS = tuple({"type": "function", "function": {"name": name, "parameters": {
    "type": "object", "properties": {arg: {"type": "string"}}}}}
    for name, arg in (("get_weather", "city"), ("search", "query")))
WEATHER = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
           "</function>\n</tool_call>")
SEARCH = ("<tool_call>\n<function=search>\n<parameter=query>\nnews\n</parameter>\n"
          "</function>\n</tool_call>")
TWO_CALLS = "Two calls.\n</think>\n\n" + WEATHER + "\n" + SEARCH


def shown(track: Track):
    """What the window shows of a finished track: its calls and its extra_tool_call count."""
    return [c.name for c in track.result.tool_calls], track.anomalies.get("extra_tool_call", 0)


def read(result):
    return [c.name for c in result.tool_calls], result.anomalies.get("extra_tool_call", 0)


def test_reparse_as_shown_is_what_a_live_one_call_reply_showed(replay_service):
    svc = replay_service(TWO_CALLS)
    feed = LiveFeed(svc, TrackStore())
    run = svc.submit(ChatRequest(messages=(Message("user", "Weather, and the news?"),),
                                 tools=TOOLS, parallel_calls=False, api="gui"))
    run.wait(5)
    feed.poll()
    track = feed.store.get(run.id)
    assert track.reading == run.reading and track.reading.one_call
    assert shown(track) == (["get_weather"], 1)
    events, result = track.reparse()
    assert read(result) == shown(track)  # was two calls and no anomaly
    assert [e.anomaly for e in events if e.anomaly] == [
        e.anomaly for e in track.events if e.anomaly]
    fixture = track.fixture()
    assert fixture["parser"]["one_call"] is True
    assert [c["name"] for c in fixture["expected"]["tool_calls"]] == ["get_weather"]
    assert fixture["expected"]["anomalies"]["extra_tool_call"] == 1
    # Re-parsed under other settings, the policy still holds: only the settings changed.
    _, streamed = track.reparse(stream_tools=not track.stream_tools)
    assert read(streamed) == shown(track)
    feed.close()


def test_reparse_as_shown_of_an_old_recording_with_parallel_calls_off(tmp_path):
    """A request record written before records held a reading: its reading is rebuilt from the
    request (parallel_calls false, tools declared), so the playback and the re-parse agree."""
    import json

    from engine.record.replay import split_text
    from inspector.playback import Playback

    path = tmp_path / "old.jsonl"
    lines = [{"format": "prism-session", "version": 1, "model": "m", "pack": "qwen3-xml"},
             {"type": "request", "id": "r1", "t": 0.0,
              "request": {"messages": [{"role": "user", "content": "Weather, and the news?"}],
                          "tools": list(TOOLS), "parallel_calls": False, "api": "openai"},
              "prompt": "<|im_start|>assistant\n<think>\n", "start_state": "reasoning",
              "api": "openai", "family": "qwen-xml", "stream_tools": True,
              "tools": list(TOOLS)}]
    lines += [{"type": "token", "id": "r1", "i": i, "tok": i, "text": piece, "t": 0.01 * i}
              for i, piece in enumerate(split_text(TWO_CALLS))]
    lines.append({"type": "finish", "id": "r1", "reason": "stop", "timings": {},
                  "result": None})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    pb = Playback(TrackStore())
    pb.set_speed(0.0)
    (item,) = pb.open(path)
    pb.poll()
    track = item.track
    assert track.status == "done" and shown(track) == (["get_weather"], 1)
    _, result = track.reparse()
    assert read(result) == shown(track)
    assert track.fixture()["expected"]["anomalies"]["extra_tool_call"] == 1


def test_track_parts_are_its_reading():
    t = Track(id="x", start_state="content", family="hermes-json", tools=[{"a": 1}])
    assert (t.reading.start, t.reading.family, t.reading.tools) == (
        "content", "hermes-json", ({"a": 1},))
    assert t.stream_tools is t.reading.stream_tools is True  # a request's default
    t.family = "qwen-xml"  # a view or a test changes one setting: the reading follows
    assert t.reading.family == "qwen-xml" and t.start_state == "content"
    assert Track(id="y").reading == Track(id="z").reading


def test_live_feed_gives_a_track_the_engine_s_prefix_match(tmp_path):
    """Issue 20: the engine's cache forensics reach the window's track at the finish."""
    from engine.backends.base import PrefixMatch
    from engine.chat.packs import resolve_pack
    from engine.service import Service
    from tests.caching_engine import CachingReplay

    prefix = PrefixMatch(held=3, source="slot", prompt_char=5, cached_text="a", prompt_text="b")
    (tmp_path / "out.txt").write_text("Done.", encoding="utf-8")
    engine = CachingReplay([tmp_path / "out.txt"], lambda prompt: (3, 0, prefix))
    try:
        svc = Service(engine, resolve_pack("smollm2", require_model=False))
        store = TrackStore()
        feed = LiveFeed(svc, store)
        run = svc.submit(ChatRequest(messages=(Message("user", "hi there"),)))
        run.wait(5)
        feed.poll()
        track = store.get(run.id)
        assert track.prefix == prefix and track.timings.cached_tokens == 3
        feed.close()
    finally:
        engine.close()
