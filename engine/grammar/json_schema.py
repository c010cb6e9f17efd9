"""GBNF grammars built from a JSON schema, for the API's structured-output formats.

Owns `from_json_schema`, a wrapper of llama-cpp-python's converter, so that `app/` never
imports `llama_cpp` (docs/design.md, section "Layers"); the engine checks a job's grammar when
it builds the job's sampler (engine/backends/llama/slots.py). Runs on the caller's thread (the
asyncio loop's, for the server).
"""

from __future__ import annotations

import json

from engine.backends.llama import log as llama_log  # noqa: F401 - closes llama-cpp-python's stray files at exit


def from_json_schema(schema: dict) -> str | None:
    """GBNF text constraining output to JSON matching `schema`, or None when llama.cpp's
    converter does not cover the schema (the caller then validates the output only)."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    try:
        return json_schema_to_gbnf(json.dumps(schema))
    except Exception:  # the converter raises assorted errors on schemas it does not support
        return None

