"""Token sources: the `Engine` protocol and the engines that implement it.

Owns the protocol every token source follows (base.py: `Engine`, `Job`, `Token`, `Finish`), the
queue and stop-string half the engines share (queued.py: `QueuedEngine`, `StopGate`), the
llama.cpp engine (llama/: the only code that touches a llama.cpp model or context, on its own
engine thread) and a remote server as an engine (upstream/: httpx on its own loop thread).
Replay, the third token source, lives with recordings (engine/record/replay.py).

Rules (import-linter contracts in pyproject.toml): llama/ and upstream/ never import each other
or engine.record; `llama_cpp` is imported only in llama/ (and by the grammar writer); nothing
here imports the parser, the service or anything above (docs/design.md, section 5).
"""
