"""Grammars: GBNF text that constrains what the model samples.

Owns JSON-schema grammars for structured output (json_schema.py: llama-cpp-python's converter,
so that `app/` never imports `llama_cpp`) and tool-call grammars in each family's own call
markup (tools.py: the choice for a request, from each family record's `grammar`; writer.py: the
grammar text). Pure text building on the caller's thread. Imports engine.parse, engine.chat and
llama_cpp's converter; never the engines.
"""

from engine.grammar.json_schema import from_json_schema

__all__ = ["from_json_schema"]
