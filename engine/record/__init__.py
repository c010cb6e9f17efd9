"""Recordings: session files written as they happen, the one loader, and replay as an engine.

Owns the recorder and loader (recording.py; any thread appends, each line written whole) and
`ReplayEngine` (replay.py: recorded or plain-text outputs played through the Engine protocol on
its own thread). Never imports the llama or upstream engines (docs/design.md, section 6).
"""
