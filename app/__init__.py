"""The application layer: the verbs (`prism`, `serve`, `parse`, `doctor`) and their wiring.

The only layer that knows all the others (docs/design.md §2): it builds an engine and a service
from the command line, puts the HTTP server (app.api) and the window (widgets, inspector) on
them, and runs the asyncio loop. It owns no model logic of its own.

Threads: the main thread runs the asyncio loop (qasync's Qt loop under the window); the engine
runs on its own thread.
"""
