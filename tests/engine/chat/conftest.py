"""The chat tests render templates that write today's date (`strftime_now`, FireFunction's
`datetime`); their goldens were rendered by transformers on 2026-12-01, so the clock the
sandbox and the renderer read is pinned to that day here: a golden must not fail at midnight."""

from __future__ import annotations

from datetime import datetime

import pytest

GOLDEN_DAY = datetime(2026, 12, 1, 12, 0, 0)


class _GoldenClock(datetime):
    @classmethod
    def now(cls, tz=None):
        return GOLDEN_DAY if tz is None else GOLDEN_DAY.replace(tzinfo=tz)


@pytest.fixture(autouse=True)
def golden_day(request, monkeypatch):
    if request.node.get_closest_marker("real_clock"):  # a test of the clock itself
        return None
    monkeypatch.setattr("engine.chat.sandbox.datetime", _GoldenClock)
    monkeypatch.setattr("engine.chat.template.datetime", _GoldenClock)
    return GOLDEN_DAY
