"""A remote OpenAI-compatible server as an engine: its `/v1/completions`, streamed.

Owns `UpstreamEngine` (engine.py: an httpx client on its own event-loop thread) and the wire
helpers (wire.py: no I/O, no threads). Never imports the llama engine (docs/design.md,
section 10).
"""
