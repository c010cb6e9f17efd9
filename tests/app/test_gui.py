"""app/gui.py: the `--screenshot` path end to end, and the request list following traffic from
a live server that runs in the window's own (qasync) loop."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before anything creates a QApplication

import httpx
import pytest

from tests.support import DEMO, ROOT, until

OUTPUTS = [
    "The user says hi.\n</think>\n\nHello! How can I help?",
    "Weather, then.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nLisbon\n"
    "</parameter>\n</function>\n</tool_call>",
    "Short.\n</think>\n\nIt is sunny. </think> Enjoy!",
]


def test_screenshot_writes_a_png(tmp_path):
    out = tmp_path / "shot.png"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    proc = subprocess.run(
        [sys.executable, "-m", "app", "--replay", str(DEMO), "--replay-speed", "0",
         "--no-server", "--no-record", "--screenshot", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"screenshot saved to {out}" in proc.stdout
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000

    from PySide6.QtGui import QImage

    img = QImage(str(out))
    assert img.width() >= 1200 and img.height() >= 800


@pytest.fixture
def qloop(qapp):
    """qasync's loop over the test's QApplication. At the end, pending callbacks (closing
    transports) run before the loop closes, so no socket notifier outlives it."""
    import qasync

    loop = qasync.QEventLoop(qapp)
    asyncio.set_event_loop(loop)
    yield loop
    loop.run_until_complete(asyncio.sleep(0.05))
    loop.close()
    asyncio.set_event_loop(None)
    qapp.processEvents()


def test_request_list_follows_server_traffic(qloop, qtbot, replay_service):
    from app.gui import Inspector

    inspector = Inspector(replay_service(*OUTPUTS), port=0)
    window, log = inspector.window, inspector.window.log
    qtbot.addWidget(window)  # deleted at teardown, not whenever the collector gets to it
    window.show()
    # A replay runs no call guard: Compose's switch says so rather than pretend.
    assert not window.compose.guard.isEnabled() and not window.compose.guard.isChecked()
    body = {"model": "anything", "messages": [{"role": "user", "content": "hi"}]}

    async def scenario() -> None:
        url = await inspector.start_server()
        assert url and url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        assert window.server_label.text() == f"OpenAI base URL: {url}"
        async with httpx.AsyncClient(base_url=url, timeout=20) as client:
            r = await client.post("/chat/completions", json=body)
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["message"]["content"] == "Hello! How can I help?"
            await until(lambda: log.model.rowCount() == 1 and log.current is not None
                        and log.current.status == "done")
            first = log.current
            assert first.source == "openai" and first.origin == "live"
            assert window.channels.text("content") == "Hello! How can I help?"

            # Streamed: the call (an implicit end of thinking) shows in the list and panes.
            async with client.stream("POST", "/chat/completions",
                                     json={**body, "stream": True}) as resp:
                chunks = [line async for line in resp.aiter_lines() if line.startswith("data:")]
            assert chunks[-1] == "data: [DONE]"
            await until(lambda: log.model.rowCount() == 2 and log.current is not first
                        and log.current.status == "done")
            second = log.current
            assert second.finish_reason == "tool_calls"
            assert second.anomalies["implicit_reasoning_end"] == 1
            assert "▸ get_weather" in window.channels.panes["call"].toPlainText()
            assert json.loads(chunks[0][5:])["object"] == "chat.completion.chunk"

            # Pinned: the user picks the older row; new traffic does not move the selection.
            log.table.selectRow(1)
            assert log.current is first and not log.follow.isChecked()
            r = await client.post("/chat/completions", json=body)
            assert r.status_code == 200
            await until(lambda: log.model.rowCount() == 3
                        and log.model.track_at(0).status == "done")
            assert log.current is first
            # Following again jumps to the newest.
            log.follow.setChecked(True)
            assert log.current is log.model.track_at(0)
            assert log.current.anomalies["stray_think_end"] == 1
        # The charts follow the engine's metrics.
        window.charts.refresh()
        assert window.charts.points("ttft_ms") == 3
        assert window.model_label.text() == f"model: {inspector.service.engine.name}"
        # Server off and on again from the window's toolbar button.
        window.server_action.setChecked(False)
        await until(lambda: inspector.url is None)
        assert window.server_label.text() == "server off" and not window.copy_btn.isEnabled()
        window.server_action.setChecked(True)
        await until(lambda: inspector.url is not None)
        async with httpx.AsyncClient(base_url=inspector.url, timeout=20) as client:
            assert (await client.get("/models")).status_code == 200
        await inspector.stop_server()
        assert not window.server_action.isChecked()
        await inspector.close()

    qloop.run_until_complete(scenario())


def test_the_qt_bindings_keep_none_alive(qapp):
    """PySide6 6.12.0 on Python 3.11 drops a reference to None on each void call (the window
    then dies with "deallocating None"); the installed bindings must not."""
    from app.gui import check_qt_bindings

    assert check_qt_bindings() is None


def test_a_busy_port_offers_a_free_one(qloop, qtbot, replay_service, tmp_path):
    """Port taken at start: the server stays off, the status bar offers a free port, and
    neither that button nor the Server button tries the busy port again."""
    import socket

    from app.gui import Inspector

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    inspector = Inspector(replay_service(*OUTPUTS), port=port)
    window = inspector.window
    qtbot.addWidget(window)
    window.show()

    async def scenario() -> None:
        assert await inspector.start_server() is None
        assert window.server_label.text().startswith(f"server off: 127.0.0.1:{port}: ")
        offered = inspector.port
        assert offered != port and window.port_btn.isVisible()
        assert window.port_btn.text() == f"Use free port {offered}"
        window.port_btn.click()
        await until(lambda: inspector.url is not None)
        assert inspector.url == f"http://127.0.0.1:{offered}/v1"
        assert not window.port_btn.isVisible()
        # Off, then on again with the Server button: the port that works, not the busy one.
        window.server_action.setChecked(False)
        await until(lambda: inspector.url is None)
        window.server_action.setChecked(True)
        await until(lambda: inspector.url is not None)
        assert inspector.url.endswith(f":{offered}/v1")
        await inspector.close()

    try:
        qloop.run_until_complete(scenario())
    finally:
        busy.close()


def test_the_window_names_where_it_records(qtbot, replay_service):
    from app.gui import Inspector, recordings_folder

    service = replay_service(*OUTPUTS, record=True)
    inspector = Inspector(service, port=0)
    window = inspector.window
    qtbot.addWidget(window)
    path = service.recorder.path
    assert window.record_label.text() == f"Recording to {path.name}"
    assert window.record_label.toolTip() == f"Recording to {path}"
    assert window.recordings_dir == recordings_folder()
    assert str(recordings_folder()) in window.actions_by_name["recordings"].text()
