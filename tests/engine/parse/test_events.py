"""engine/parse/events.py: the kinds issue 22 adds. `invalid_arguments` is an anomaly of the
model, counted with the parser's; `guided_token` is a fact about the run (the guard changed the
sampled token), its own event kind, which nothing counts as an anomaly."""

from __future__ import annotations

from engine.parse.events import (
    ANOMALY,
    ANOMALY_KINDS,
    CONTENT,
    GUIDED_TOKEN,
    INVALID_ARGUMENTS,
    KINDS,
    Event,
    merge,
    result_of,
)


def test_invalid_arguments_is_counted_as_an_anomaly():
    res = result_of([Event(CONTENT, "Hi", (0, 2)),
                     Event(ANOMALY, "/units: 'units' is a required property", (2, 2),
                           anomaly=INVALID_ARGUMENTS)])
    assert INVALID_ARGUMENTS in ANOMALY_KINDS
    assert res.anomalies[INVALID_ARGUMENTS] == 1
    assert res.to_dict()["anomalies"][INVALID_ARGUMENTS] == 1


def test_a_guided_token_is_an_event_kind_and_no_anomaly():
    events = [Event(CONTENT, "Hi", (0, 2)), Event(GUIDED_TOKEN, " there", (2, 2)),
              Event(CONTENT, " there", (2, 8))]
    assert GUIDED_TOKEN in KINDS and GUIDED_TOKEN not in ANOMALY_KINDS
    res = result_of(events)
    assert res.content == "Hi there"
    assert not any(res.anomalies.values()) and GUIDED_TOKEN not in res.to_dict()["anomalies"]
    # Discrete, like an anomaly: it never merges into its neighbours, so it is not lost.
    assert [e.kind for e in merge(events)] == [CONTENT, GUIDED_TOKEN, CONTENT]
