"""widgets/metrics_chart.py: ring buffers, and charts that receive points from a playback."""

from __future__ import annotations

import numpy as np

from engine.parse.events import IMPLICIT_REASONING_END, STRAY_THINK_END
from tests.widgets.conftest import DEMO
from widgets.metrics_chart import RingBuffer


def test_ring_buffer_keeps_the_last_points_contiguous():
    buf = RingBuffer(capacity=5)
    buf.extend((float(i), float(i * i)) for i in range(23))
    x, y = buf.view()
    assert x.dtype == np.float64 and y.dtype == np.float64
    assert list(x) == [18.0, 19.0, 20.0, 21.0, 22.0]
    assert list(y) == [v * v for v in x]
    assert len(buf) == 5 and buf.last_x == 22.0
    buf.clear()
    assert len(buf) == 0 and buf.last_x == float("-inf")


def test_charts_receive_points_while_a_recording_plays(window, clock):
    charts, pb = window.charts, window.playback
    pb.open(DEMO)  # 1×, on the test's clock
    for _ in range(60):  # about 12 s of the recording, in 0.2 s frames
        clock.advance(0.2)
        window.frame()
        charts.refresh()
    assert pb.finished
    assert charts.source is pb
    assert charts.points("tokens_per_s") >= 20
    assert charts.points("ttft_ms") == 3  # one per request
    assert charts.points(f"anomalies.{IMPLICIT_REASONING_END}") >= 2
    assert charts.points(f"anomalies.{STRAY_THINK_END}") >= 2
    x, y = charts.curves["tokens_per_s"].getData()
    assert x.dtype == np.float64 and np.all(np.diff(x) >= 0)
    # The recording runs at about 40 tokens/s; the chart says so.
    assert 25 < float(np.max(y)) < 60
    _, ttft = charts.curves["ttft_ms"].getData()
    assert all(150 < v < 400 for v in ttft)
    # The y axes run from zero to just above the highest visible point.
    lo_y, hi_y = charts.plots["ttft_ms"].viewRange()[1]
    assert lo_y == 0 and max(ttft) < hi_y <= 1.2 * max(ttft)
    # Idle: the charts keep scrolling (and tokens/s falls to zero).
    clock.advance(5.0)
    charts.refresh()
    x2, y2 = charts.curves["tokens_per_s"].getData()
    assert x2[-1] > x[-1] and y2[-1] == 0.0
    lo, hi = charts.plots["tokens_per_s"].viewRange()[0]
    assert lo <= x2[-1] <= hi + 1


def test_the_draft_plot_shows_each_speculating_requests_kept_share(qtbot):
    from engine.backends.base import Timings
    from engine.metrics import Metrics
    from widgets.metrics_chart import MetricsCharts

    class Live:  # a service's face as the charts see it (inspector/tracks.py TrackSource)
        def __init__(self) -> None:
            self.metrics = Metrics()

        def sample(self) -> None:
            self.metrics.sample()

    charts = MetricsCharts()
    qtbot.addWidget(charts)
    src = Live()
    charts.set_source(src, "live")
    t0 = src.metrics.t0
    for i, (drafted, kept) in enumerate([(40, 30), (0, 0), (20, 5)]):
        src.metrics.request_started(f"r{i}", "openai", "smol", 5, t=t0 + i)
        src.metrics.request_finished(f"r{i}", "stop", Timings(
            output_tokens=50, draft_tokens=drafted, accepted_tokens=kept), t=t0 + i + 0.5)
    charts.refresh()
    x, y = charts.curves["draft_kept_pct"].getData()
    assert list(y) == [75.0, 25.0]  # the request without drafts has no point
    assert list(x) == [0.5, 2.5]
    assert charts.plots["draft_kept_pct"].viewRange()[1][1] >= 75.0
