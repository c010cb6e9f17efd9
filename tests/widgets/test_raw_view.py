"""widgets/raw_view.py's token strip and the call guard (issue 22): a token the guard chose is
drawn in its own colours, its tooltip names the model's own draw and the token taken, the
heading counts them (and widgets/channel_view.py's tools pane title); live (the service's run
in a real window) and played back from the recording of that run alike
(engine/record/recording.py keeps the marks, inspector/playback.py passes them on).

The guarded run is tests/engine/backends/llama/test_guard.py's: two earlier get_weather turns,
then "Weather in Rome for 4 days?" at temperature 0.8, seed 1, on the real default model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.chat.packs import resolve_pack
from engine.chat.request import ChatRequest, Message, Sampling
from engine.metrics import Metrics
from engine.parse.events import GUIDED_TOKEN
from engine.record.recording import Recorder
from engine.service import Service
from tests.engine.backends.llama.test_guard import HISTORY, WEATHER_TOOLS
from tests.widgets.conftest import play_all
from tests.widgets.test_compose_box import live_window
from widgets.theme import GUIDED

pytestmark = pytest.mark.model


def dumps(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)

ROME = ChatRequest(messages=(*HISTORY, Message("user", "Weather in Rome for 4 days?")),
                   tools=WEATHER_TOOLS, sampling=Sampling(temperature=0.8, seed=1),
                   max_tokens=60, api="gui")


@pytest.fixture(scope="module")
def service(default_model: Path, tmp_path_factory):
    from engine.backends.llama.engine import LlamaEngine

    engine = LlamaEngine(default_model, n_ctx=2048, parallel=2, n_threads=1)
    assert engine.ready.wait(60) and engine.load_error is None
    recorder = Recorder(tmp_path_factory.mktemp("strip") / "guarded.jsonl", model="smollm2",
                        pack="smollm2")
    yield Service(engine, resolve_pack("smollm2"), metrics=Metrics(engine), recorder=recorder)
    engine.close()
    recorder.close()


def marks(strip) -> dict[int, bool]:
    """Per token drawn: whether its box carries the guard's format."""
    starts = [0, *strip._ends[:-1]]
    return {i: bool(strip.format_at(p).property(GUIDED)) for i, p in enumerate(starts)}


def check_strip(raw, tokens) -> None:
    guided = [i for i, t in enumerate(tokens) if t.guided is not None]
    assert guided, "the guard changed nothing in this run"
    assert marks(raw.strip) == {i: i in guided for i in range(len(tokens))}
    for i in guided:
        tip = raw.strip._tip(raw.strip._ends[i] - 1)
        tok = tokens[i]
        assert f"guard: model drew {dumps(tok.guided)}, took {dumps(tok.text)}" in tip
    plain = next(i for i in range(len(tokens)) if i not in guided)
    assert "guard:" not in raw.strip._tip(raw.strip._ends[plain] - 1)
    assert f"{len(guided)} chosen by the call guard" in raw.label.text()
    # The raw text marks the same tokens, and nothing else.
    text = "".join(t.text for t in tokens)
    assert raw.text() == text
    ends = [len("".join(t.text for t in tokens[:k + 1])) for k in range(len(tokens))]
    for i, tok in enumerate(tokens):
        for at in range(ends[i] - len(tok.text), ends[i]):
            if text[at] == "\n":
                continue  # a block break: no character format of its own
            fmt = raw.raw.format_at(at)
            assert bool(fmt.property(GUIDED)) == (tok.guided is not None), (i, at)
            if tok.guided is not None:
                assert fmt.toolTip().startswith(f"guard: model drew {dumps(tok.guided)}")


def test_a_live_guarded_run_shows_which_tokens_the_guard_chose(qtbot, service):
    win, feed = live_window(qtbot, service)
    run = service.submit(ROME)
    qtbot.waitUntil(lambda: win.log.current is not None and win.log.current.id == run.id
                    and win.log.current.status == "done", timeout=120_000)
    win.frame()
    track = win.log.current
    assert [t.guided for t in track.tokens] == [t.guided for t in run.tokens]
    check_strip(win.raw, track.tokens)
    n = sum(t.guided is not None for t in track.tokens)
    assert f"{n} guided token" in win.channels.titles["call"].text()  # the tools pane counts
    win.raw.grab().save("/tmp/guard.png")
    feed.close()


def test_the_recording_plays_back_with_the_same_marks(window, service):
    if not service.recorder.path.stat().st_size or not any(
            '"guided"' in ln for ln in service.recorder.path.read_text().splitlines()):
        run = service.submit(ROME)  # run alone: record one
        run.wait(120)
    item = next(it for it in play_all(window, service.recorder.path)
                if any(t.guided is not None for t in it.tokens))
    window.log.select(item.track)
    window.frame()
    track = item.track
    assert track.status == "done"
    assert [t.guided for t in track.tokens] == [t.guided for t in item.tokens]
    # Played back through the pipeline: one guided_token event per guided token.
    assert sum(ev.kind == GUIDED_TOKEN for ev in track.events) == sum(
        t.guided is not None for t in track.tokens)
    check_strip(window.raw, track.tokens)
