"""The engine layer: the model, the output parser, templates, packs, recordings and metrics.

Rules of the layer (docs/design.md §2, enforced by import-linter in pyproject.toml): no Qt, no
HTTP (never imports PySide6, fastapi, uvicorn, starlette), and nothing from `app`, `inspector`
or `widgets`. Everything above builds on it; it builds on nothing of ours.

Threads (docs/design.md §3): only the engine thread touches a llama.cpp model or context; the
per-token pipeline (parser, recorder, metrics) runs on whichever thread delivers the tokens;
every object that crosses a thread is a frozen dataclass.
"""
