"""The output parser, as a library of its own: model text in, channel events out.

Rules of the package (an import-linter contract in pyproject.toml): **standard library only**;
nothing here knows of llama.cpp, templates, HTTP, Qt or the rest of `engine`. Everything else
builds on it; it builds on nothing of ours. Pure Python, no I/O: the parser runs on whichever
thread feeds it (the engine thread live, the GUI thread in playback and re-parse, the caller in
`prism parse`), one parser per response (docs/design.md, section 4).

Inside: `parser.py` drives the scan, `parser_tags.py` decides tags, `parser_calls.py` holds a
call's state, `quoting.py` tracks fences and inline code, `markers.py` names a family's tags,
`events.py` the events and the result, `schema.py` types values by a tool's schema,
`filters.py` what a request's policy delivers of the events (one call per reply, calls as
text), `reading.py` how one output is read (`Reading`: the parser's settings and those
filters, stored with each recorded request), and `families/` one module per model family (its
reader, and the registry that names them).

The public face is what follows; import the rest by its module when a test needs it.
"""

from engine.parse.events import (
    ANOMALY,
    ANOMALY_KINDS,
    CONTENT,
    KINDS,
    MARKUP,
    REASONING,
    TOOL_ARGS,
    TOOL_CALL,
    TOOL_START,
    Event,
    ParseResult,
    ToolCall,
    result_of,
)
from engine.parse.parser import OutputParser
from engine.parse.reading import Reading

__all__ = [
    "ANOMALY", "ANOMALY_KINDS", "CONTENT", "KINDS", "MARKUP", "REASONING", "TOOL_ARGS",
    "TOOL_CALL", "TOOL_START", "Event", "OutputParser", "ParseResult", "Reading", "ToolCall",
    "result_of",
]
