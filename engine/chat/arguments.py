"""Tool-call arguments checked against the declared tool's schema (issue 22).

Owns `ArgumentError` (one failure: where, in JSON pointer form, and what), `ToolChecks` (the
request's declared tools, one compiled jsonschema validator each) and `ArgumentCheck`, the event
filter the token pipeline (engine/pipeline.py) puts right after the parser of a run that declared
tools. A complete call whose arguments break its tool's `parameters` gets one `invalid_arguments`
anomaly, just before its `tool_call` event, whose text says what failed and where
(`/units: 'units' is a required property`). The call itself passes unchanged: the client gets it
as the model wrote it; the anomaly is what the metrics, the recording, the ledger and the window
count and show. Small models open a call correctly and then break it (a required enum left out,
a string for a number); before this such a call was counted nowhere.

Why here and not in the parser: engine/parse is standard-library only and jsonschema is not;
and it is not the parser's finding but a check of what it found against the request, as
`FirstCallOnly` is a policy on it. A call to an undeclared tool is the parser's `unknown_tool`
and is not checked (there is no schema to break). A tool's schema picks its validator by its
`$schema`, Draft 2020-12 when it names none; validators are compiled on a tool's first call and
kept for the request (tools do not change mid-request). A schema that is itself invalid, or that
cannot be applied (a `$ref` that does not resolve), checks nothing and is reported once per
process in a log line: a client's bad schema must never stop a run.

Threads: a filter runs on the thread that feeds its pipeline (the engine thread live, the GUI
thread in playback). Compiled validators belong to their filter; the set of schemas already
reported is process-wide, behind a lock.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for

from engine.parse.events import ANOMALY, INVALID_ARGUMENTS, TOOL_CALL, Event
from engine.parse.families.common import tool_schemas

log = logging.getLogger("prism")

# More failures than this in one call make a message nobody reads; the rest are counted.
MAX_ERRORS = 5
# Bad schemas already reported (by tool name and schema text); cleared when this many, so a
# long-running server that meets endless distinct bad schemas cannot grow it without bound.
_MAX_REPORTED = 1024
_reported: set[tuple[str, str]] = set()
_reported_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class ArgumentError:
    """One way a call's arguments break its tool's schema.

    pointer: where, as a JSON pointer into the arguments ("" is the arguments object itself;
        for a missing required property, the property that is missing).
    message: what failed, in jsonschema's words.
    """

    pointer: str
    message: str

    def __str__(self) -> str:
        return f"{self.pointer or '(root)'}: {self.message}"


def describe(errors: Sequence[ArgumentError]) -> str:
    """The anomaly's text: the first `MAX_ERRORS` failures, then how many more."""
    text = "; ".join(str(e) for e in errors[:MAX_ERRORS])
    more = len(errors) - MAX_ERRORS
    return text + (f"; and {more} more" if more > 0 else "")


def _pointer(path: Iterable[Any]) -> str:
    # RFC 6901: "~" and "/" inside a key are escaped, in that order.
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _error(e) -> ArgumentError:
    """A jsonschema `ValidationError` as an `ArgumentError`. A `required` failure is reported at
    the property that is missing, not at the object that lacks it: that is where the fix goes."""
    path = list(e.absolute_path)
    if e.validator == "required" and isinstance(e.instance, dict):
        # One error per missing name, its message starting with the name's repr.
        missing = next((p for p in e.validator_value if isinstance(p, str)
                        and p not in e.instance and e.message.startswith(repr(p))), None)
        if missing is not None:
            path.append(missing)
    return ArgumentError(_pointer(path), e.message)


def _report_once(name: str, schema: dict, why: str) -> None:
    try:
        text = json.dumps(schema, sort_keys=True, default=str)
    except (TypeError, ValueError):  # not JSON (a circular dict): still reported, keyed apart
        text = repr(id(schema))
    key = (name, text)
    with _reported_lock:
        if key in _reported:
            return
        if len(_reported) >= _MAX_REPORTED:
            _reported.clear()
        _reported.add(key)
    log.warning("[prism] the schema of tool %r cannot check its calls' arguments, so they are "
                "not checked: %s", name, why[:300])


def compile_schema(name: str, schema: dict):
    """A validator for `schema` (the class its `$schema` names, Draft 2020-12 by default), or
    None, reported once, when the schema is itself invalid."""
    try:
        cls = validator_for(schema, default=Draft202012Validator)
        cls.check_schema(schema)
        return cls(schema)
    except Exception as e:  # SchemaError, a `$schema` that is no string...: never the run's end
        _report_once(name, schema, f"{type(e).__name__}: {getattr(e, 'message', e)}")
        return None


class ToolChecks:
    """The tools a request declared (OpenAI-style, bare functions or Anthropic's
    `input_schema`, read as the parser reads them), each checked by its own validator,
    compiled on the tool's first call. Not thread-safe: one per run."""

    def __init__(self, tools: Iterable[dict]) -> None:
        self._schemas = tool_schemas(tuple(tools))
        self._validators: dict[str, Any] = {}

    def __bool__(self) -> bool:
        return bool(self._schemas)

    def errors(self, name: str, arguments: Any) -> tuple[ArgumentError, ...] | None:
        """How `arguments` break tool `name`'s schema (empty: they fit), or None when there is
        nothing to check them against (an undeclared tool, a schema that cannot check)."""
        if name not in self._schemas:
            return None
        if name not in self._validators:
            self._validators[name] = compile_schema(name, self._schemas[name])
        validator = self._validators[name]
        if validator is None:
            return None
        try:
            return tuple(_error(e) for e in validator.iter_errors(arguments))
        except Exception as e:  # an unresolvable $ref, a recursion too deep: reported, skipped
            self._validators[name] = None
            _report_once(name, self._schemas[name], f"{type(e).__name__}: {e}")
            return None


class ArgumentCheck:
    """An event filter (engine/parse/filters.py): before each complete call whose arguments
    break its tool's schema, an `invalid_arguments` anomaly (zero-width, where the call's span
    begins, with the call's index and id), whose text is `describe()` of the failures. Every
    event passes unchanged; nothing is held back."""

    def __init__(self, tools: Iterable[dict]) -> None:
        self.checks = ToolChecks(tools)

    def feed(self, events: Sequence[Event]) -> list[Event]:
        out: list[Event] = []
        for ev in events:
            call = ev.call
            if ev.kind == TOOL_CALL and call is not None:
                errors = self.checks.errors(call.name, call.arguments)
                if errors:
                    at = ev.span[0]
                    out.append(Event(ANOMALY, describe(errors), (at, at), None,
                                     INVALID_ARGUMENTS, ev.index, ev.call_id))
            out.append(ev)
        return out

    def finish(self) -> list[Event]:
        return []
