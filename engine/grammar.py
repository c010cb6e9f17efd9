"""GBNF grammars: built from a JSON schema, and checked before llama.cpp is handed one.

Owns `from_json_schema` (what the API's structured-output formats use to constrain generation)
and `check` (what the llama engine runs on a job's grammar before sampling with it). Both wrap
llama-cpp-python's own grammar code, so `app/` never imports `llama_cpp` (docs/design.md,
section "Layers"). `from_json_schema` runs on the caller's thread (the asyncio loop's, for the
server); `check` on the engine's worker thread.
"""

from __future__ import annotations

import json
from typing import Any


def from_json_schema(schema: dict) -> str | None:
    """GBNF text constraining output to JSON matching `schema`, or None when llama.cpp's
    converter does not cover the schema (the caller then validates the output only)."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    try:
        return json_schema_to_gbnf(json.dumps(schema))
    except Exception:  # the converter raises assorted errors on schemas it does not support
        return None


def check(model: Any, text: str) -> Any:
    """Parse GBNF now and return llama-cpp-python's `LlamaGrammar` for it: llama-cpp-python
    would hand a NULL sampler to llama.cpp on a bad grammar and crash the process."""
    import llama_cpp
    from llama_cpp import LlamaGrammar

    grammar = LlamaGrammar.from_string(text, verbose=False)
    sampler = llama_cpp.llama_sampler_init_grammar(model.vocab, text.encode(), b"root")
    if not sampler:
        raise ValueError("invalid GBNF grammar (llama.cpp could not parse it)")
    llama_cpp.llama_sampler_free(sampler)
    return grammar
