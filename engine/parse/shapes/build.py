"""From one `CallFormat` to a family's reader, writer and forced-call grammar.

Owns `Engine` (what a shape engine makes of a record) and `engine` (the dispatch on the
record's shape), `writer_of` and `grammar_of` (the writer and grammar alone, for a family that
keeps a reader of its own: MiniMax-M1's section, GigaChat 3 and 3.1, Functionary v3.2,
Apertus), and
`shape_family`, the `Family` record of a family whose calls are a record:
its markers, opener test, reader, writer and grammar all come from the one record, so a family
module is its record, its docstring and only what is truly its own. Built once at import; the
records are frozen and read by any thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.parse.families.registry import CallGrammar, Family, Writer
from engine.parse.markers import THINK_CLOSE, THINK_OPEN, Markers
from engine.parse.shapes import json_list, json_object, name_json, python_calls, tagged
from engine.parse.shapes.record import (
    JSON_LIST,
    JSON_OBJECT,
    NAME_JSON,
    PYTHON_LIST,
    TAGGED,
    CallFormat,
)

THINK = (THINK_OPEN, THINK_CLOSE)
# How the `<think>` families write a reasoning block (registry.think_writer's text).
_THINK_TEXT = {"reasoning_open": THINK_OPEN + "\n", "reasoning_close": "\n" + THINK_CLOSE + "\n\n"}


@dataclass(frozen=True, slots=True)
class Engine:
    """What a shape engine makes of one record.

    reader: the `CallParser` class of one call body; match_opener: does a body start at
    text[i]; openers: the call openers the parser scans for; write_call / grammar_call: one
    call written and forced; open / close: what frames a list of calls (writer and grammar).
    """

    reader: type
    match_opener: Callable[[str, int], Any]
    openers: tuple[str, ...]
    write_call: Callable
    grammar_call: Callable
    open: str
    close: str


def engine(fmt: CallFormat) -> Engine:
    """The shape engine's reader, writer and grammar for `fmt`."""
    if fmt.shape == TAGGED:
        return Engine(tagged.tagged_reader(fmt), tagged.opener_test(fmt), tagged.openers(fmt),
                      tagged.write_call(fmt), tagged.grammar_call(fmt), fmt.section,
                      fmt.section_end)
    if fmt.shape == JSON_OBJECT:
        return Engine(json_object.object_reader(fmt), json_object.opener_test(fmt),
                      json_object.openers(fmt), json_object.write_call(fmt),
                      json_object.grammar_call(fmt), fmt.section, fmt.section_end)
    if fmt.shape == NAME_JSON:
        return Engine(name_json.name_json_reader(fmt), name_json.opener_test(fmt),
                      name_json.openers(fmt), name_json.write_call(fmt),
                      name_json.grammar_call(fmt), fmt.section, fmt.section_end)
    mod = json_list if fmt.shape == JSON_LIST else python_calls
    reader = json_list.list_reader(fmt) if fmt.shape == JSON_LIST else \
        python_calls.python_reader(fmt)
    assert fmt.shape == JSON_LIST or fmt.shape == PYTHON_LIST
    return Engine(reader, mod.opener_test(fmt), mod.openers(fmt), mod.write_call(fmt),
                  mod.grammar_call(fmt), *mod.frame(fmt))


def writer_of(fmt: CallFormat, eng: Engine | None = None, *, think: bool = False,
              **writer: Any) -> Writer:
    """The `Writer` of a format's calls (`think`: reasoning in `<think>` blocks; `writer`: the
    rest of its fields), for a family that keeps a reader of its own."""
    eng = eng or engine(fmt)
    return Writer(eng.write_call, calls_open=eng.open, calls_sep=fmt.sep, calls_close=eng.close,
                  **{**(_THINK_TEXT if think else {}), **writer})


def grammar_of(fmt: CallFormat, eng: Engine | None = None, **grammar: Any) -> CallGrammar:
    """The forced-call grammar of a format's calls (`grammar`: `several`)."""
    eng = eng or engine(fmt)
    return CallGrammar(eng.grammar_call, open=eng.open, sep=fmt.sep, close=eng.close, **grammar)


def shape_family(fmt: CallFormat, *, name: str, models: str,
                 reasoning: tuple[str, str] | None = None, writer: dict | None = None,
                 markers: dict | None = None, reader: Callable[[type], type] | None = None,
                 match_opener: Callable[[str, int], Any] | None = None,
                 **family: Any) -> Family:
    """The `Family` of a format: `reasoning` (opener, closer) its reasoning tags (None: none);
    `writer` the `Writer`'s reasoning text (`<think>`'s by default with THINK) and
    `before_calls`; `markers` more `Markers` fields; `reader` the family's own repairs, given
    the engine's reader class (returns a subclass); `match_opener` its own opener test (where a
    repair lets more text start a call); `family` the rest of the record (detection, stops,
    pack, ...)."""
    eng = engine(fmt)
    writer = {**(_THINK_TEXT if reasoning == THINK else {}), **(writer or {})}
    bare = ("[", "{") if fmt.line_start else ()
    body = tuple(o for o in eng.openers if o in bare)
    mk = Markers(*(reasoning or (None, None)), eng.openers, body_openers=body, line_calls=body,
                 **(markers or {}))
    w, grammar = writer_of(fmt, eng, **writer), grammar_of(fmt, eng)
    return Family(name=name, models=models, markers=mk,
                  match_opener=match_opener or eng.match_opener,
                  call_parser=reader(eng.reader) if reader else eng.reader, writer=w,
                  grammar=grammar, format=fmt, **family)


__all__ = ["THINK", "Engine", "engine", "grammar_of", "shape_family", "writer_of"]
