"""Chat: what goes into the model. Requests, templates, packs, special tokens, and what a chat
template says about its model family (detection, where reasoning starts, history repair).

Owns `ChatRequest` / `Message` / `Sampling` (request.py), the sandboxed jinja renderer and
history repair (template.py), packs (packs.py: a template, stops and settings by name, or read
from a GGUF through engine/gguf.py), the special-token rules for message text (special.py),
family detection (detect.py, which asks the family registry in engine/parse/families) and the
check of a call's arguments against the request's declared tools (arguments.py). No model,
no I/O beyond reading pack and template files; runs on the caller's thread (the server renders
in a worker thread). Imports engine.parse and engine.gguf, nothing else of engine
(docs/design.md, section 2).
"""
