"""The inspector layer: the window's model, as plain Python objects.

Owns what the window shows, without drawing it: a `Track` per request and the bounded
`TrackStore` (inspector/tracks.py), the `LiveFeed` that carries a service's run updates to
tracks, the `Playback` of recordings (inspector/playback.py), the read-back of a released row
from its recording (inspector/recall.py), the request filter (inspector/query.py over
inspector/summaries.py) and the re-run feeds (inspector/rerun.py). The views in `widgets/` read
these objects; `app/gui.py` builds them.

Rules of the layer (docs/design.md §2, import-linter contracts): imports `engine` only; never
PySide6 (or any Qt), never `llama_cpp`, never `app` or `widgets`. Being Qt-free is what lets the
window's behaviour be tested and benchmarked without a window.

Threads (docs/design.md §3): everything here runs on the GUI thread, inside the window's frame
timer; the one exception is `LiveFeed._on_update`, called on the engine thread, which only
appends to a deque.
"""
