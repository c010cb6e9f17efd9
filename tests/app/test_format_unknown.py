"""A template whose call format no family reads (issue 19, item 4): detection says so instead
of guessing a neighbour, at start (a warning naming why), in /v1/models (`meta.format`) and in
the window's title; a template without tools is not "unknown" (it writes no calls at all)."""

from __future__ import annotations

import logging

from app.gui import window_title
from engine.chat.detect import UNKNOWN, detect
from engine.chat.packs import pack_from_template
from engine.metrics import Metrics
from engine.record.replay import ReplayEngine
from engine.service import Service
from tests.app.conftest import start_live

# Renders tools and writes calls in a syntax of its own, with no family's markers.
ODD = ("{% for m in messages %}<|turn|>{{ m.role }}: {{ m.content }}\n{% endfor %}"
       "{% if tools %}Call with <<call NAME ARGS>>: {{ tools | tojson }}{% endif %}"
       "<|turn|>assistant: ")
PLAIN = "{% for m in messages %}<|turn|>{{ m.role }}: {{ m.content }}\n{% endfor %}"


def test_a_template_with_tools_and_no_known_markers_is_unknown(caplog):
    caplog.set_level(logging.INFO, logger="prism")
    assert detect(ODD).unknown and detect(ODD).family == "auto"
    pack = pack_from_template("odd", ODD, "test")
    assert pack.format_unknown and pack.family_origin.startswith(UNKNOWN)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warned and UNKNOWN in warned[0].getMessage()
    assert UNKNOWN in window_title("m.gguf", pack)


def test_a_template_without_tools_or_with_a_family_is_not_unknown():
    plain = pack_from_template("plain", PLAIN, "test")
    assert not detect(PLAIN).unknown and not plain.format_unknown
    assert window_title("m.gguf", plain) == "Prism — m.gguf (plain, family auto)"
    hermes = pack_from_template("h", ODD.replace("<<call", "<tool_call>"), "test")
    assert not hermes.format_unknown and hermes.family == "hermes-json"


def test_v1_models_says_the_format_is_unknown(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("Hello.", encoding="utf-8")
    engine = ReplayEngine([out], speed=0.0, n_ctx=4096)
    service = Service(engine, pack_from_template("odd", ODD, "test"), metrics=Metrics(engine))
    live = start_live(service)
    try:
        meta = live.http().get("/v1/models").json()["data"][0]["meta"]
        assert meta["format"] == UNKNOWN and meta["family"] == "auto"
    finally:
        live.close()
        engine.close()
        live.thread.stop()
