"""Bounds on what a JSON schema may expand to in a grammar, checked before llama.cpp sees it.

Owns `bound(schema, path)` (a copy of the schema that expands to a bounded grammar, and what
was relaxed to get there), `pattern_gbnf` (a schema `pattern` rewritten into the regex subset
llama-cpp-python's converter turns into valid GBNF, or why not), `GrammarTooLarge`, the limits,
and the count of bounds relaxed (`count_relaxed`, `relaxed_total`: a lock-guarded tally, any
thread). Pure data work on the caller's thread (the asyncio loop's, or the service's).

Why: llama-cpp-python's converter writes a `maxLength`, `maxItems` or regex `{m,n}` of N as N
nested optional groups, `(c (c (c ...)?)?)?`. llama.cpp's GBNF parser recurses once per group:
a few thousand of them exceed its own repetition check (the job is refused), tens of thousands
overflow the C stack and kill the process, every stream in flight with it. Large enums make
every sampled token pay for each alternative. So each count written into a grammar is at most
`REPEAT` and one schema's counts together at most `REPEAT_BUDGET`; beyond that the bound is
dropped from the grammar (the node is then an unconstrained value of the same type) and the
relaxation is reported, since the output is still checked against the whole schema where the
API checks it. The grammar text itself is at most `GRAMMAR_BYTES`, else `GrammarTooLarge`.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from typing import Any

REPEAT = 500  # most a maxLength, minLength, maxItems, minItems or {m,n} writes (llama.cpp: ~1,100)
REPEAT_BUDGET = 10_000  # all of one schema's counts together
ENUM_VALUES = 500  # values of one enum (OpenAI allows 500 in a whole schema)
LITERAL_CHARS = 64 * 1024  # JSON text of one enum's (const's) values together
PROPERTIES = 200  # declared properties of one object (the converter is quadratic in them)
PATTERN_CHARS = 1000  # length of one pattern
GRAMMAR_BYTES = 1024 * 1024  # the GBNF text of one schema, or of one forced-call grammar

_tally_lock = threading.Lock()
_tally = 0


def count_relaxed(n: int) -> None:
    """Count `n` bounds a grammar was built without (whoever reports them: one request's
    output format, or one forced-call or guard grammar); `/metrics` exports the total."""
    global _tally
    with _tally_lock:
        _tally += n


def relaxed_total() -> int:
    """Bounds relaxed since the process started (`prism_schema_bounds_relaxed_total`)."""
    return _tally


_DATA = frozenset({"enum", "const", "default", "examples"})  # values, not subschemas
_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties",
                   "dependentSchemas"})  # names -> subschemas
_JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
               (type(None), "null"), (dict, "object"), (list, "array"))


class GrammarTooLarge(ValueError):
    """A schema whose grammar would exceed `GRAMMAR_BYTES` even with every bound relaxed."""

    def __init__(self, path: str, size: int, limit: int = GRAMMAR_BYTES) -> None:
        super().__init__(f"'{path}' makes a grammar of {size:,} bytes; the limit is "
                         f"{limit:,}: send a smaller schema (fewer properties, tools or "
                         "enum values)")
        self.path = path


@dataclass(frozen=True, slots=True)
class Bounded:
    """A schema whose grammar is bounded, and each relaxation made ("PATH: what")."""

    schema: Any
    relaxed: tuple[str, ...] = ()


def _key(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _types(values: list) -> list[str]:
    out: list[str] = []
    for v in values:
        name = next(n for t, n in _JSON_TYPES if isinstance(v, t))
        if name not in out:
            out.append(name)
    return out


def bound(schema: Any, path: str) -> Bounded:
    """A copy of `schema` whose grammar stays within the limits above; `path` names the
    schema in the request (each relaxation names the field below it)."""
    relaxed: list[str] = []
    counts: list[tuple[int, dict, str, str]] = []  # (count, node, keyword, path) kept

    def walk(node: Any, where: str) -> Any:
        if isinstance(node, list):
            return [walk(v, _key(where, i)) for i, v in enumerate(node)]
        if not isinstance(node, dict):
            return node
        out = {}
        for k, v in node.items():
            if k in _MAPS and isinstance(v, dict):  # name -> schema: a name is no keyword
                out[k] = {n: walk(s, _key(_key(where, k), n)) for n, s in v.items()}
            else:
                out[k] = v if k in _DATA else walk(v, _key(where, k))
        _node(out, where, relaxed, counts)
        return out

    out = walk(schema, path)
    # Over budget: the largest counts go first (each alone was under REPEAT).
    total = sum(c for c, *_ in counts)
    for count, node, kw, where in sorted(counts, key=lambda c: -c[0]):
        if total <= REPEAT_BUDGET:
            break
        node.pop(kw, None)
        total -= count
        relaxed.append(f"{where}.{kw}: {count} (this schema's counts together exceed "
                       f"{REPEAT_BUDGET})")
    return Bounded(out, tuple(relaxed))


def _node(node: dict, where: str, relaxed: list[str], counts: list) -> None:
    """Relax one schema node in place where it exceeds a limit."""
    for kw in ("minLength", "maxLength", "minItems", "maxItems"):
        n = node.get(kw)
        if isinstance(n, int) and not isinstance(n, bool):
            if n > REPEAT:
                del node[kw]
                relaxed.append(f"{_key(where, kw)}: {n} (over {REPEAT}; not enforced while "
                               "sampling)")
            elif n > 0:
                counts.append((n, node, kw, where))
    for kw in ("enum", "const"):
        if kw not in node:
            continue
        values = node[kw] if kw == "enum" else [node[kw]]
        if not isinstance(values, list):
            continue
        size = len(json.dumps(values, ensure_ascii=False))
        if len(values) > ENUM_VALUES or size > LITERAL_CHARS:
            del node[kw]
            if "type" not in node and values:
                types = _types(values)
                node["type"] = types[0] if len(types) == 1 else types
            relaxed.append(f"{_key(where, kw)}: {len(values)} values, {size:,} characters "
                           f"(over {ENUM_VALUES} values or {LITERAL_CHARS:,} characters)")
    props = node.get("properties")
    if isinstance(props, dict) and len(props) > PROPERTIES:
        del node["properties"]
        node.pop("required", None)
        relaxed.append(f"{_key(where, 'properties')}: {len(props)} properties (over "
                       f"{PROPERTIES}; any object while sampling)")
    pattern = node.get("pattern")
    if isinstance(pattern, str):
        rewritten, why, reps = pattern_gbnf(pattern)
        if rewritten is None:
            del node["pattern"]
            relaxed.append(f"{_key(where, 'pattern')}: {why} (any string while sampling)")
        else:
            node["pattern"] = rewritten
            if reps:
                counts.append((reps, node, "pattern", where))


# Patterns -------------------------------------------------------------------------------------

_CLASSES = {"d": "0-9", "w": "0-9A-Za-z_", "s": " \\t\\n\\r\\x0B\\x0C"}
_QUANT = re.compile(r"\{(\d*)(,?)(\d*)\}")
_HEX = re.compile(r"x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}")


def _escape(p: str, i: int, in_class: bool) -> tuple[str, int] | str:
    """The escape at p[i] (a backslash) rewritten, and where it ends; or why it cannot be."""
    if i + 1 >= len(p):
        return "a trailing backslash"
    c = p[i + 1]
    if c in _CLASSES:
        return (_CLASSES[c] if in_class else f"[{_CLASSES[c]}]"), i + 2
    if c in "DWS":
        if in_class:
            return f"a negated class escape \\{c} inside [...]"
        return f"[^{_CLASSES[c.lower()]}]", i + 2
    if c in "xu":
        m = _HEX.match(p, i + 1)
        if not m:
            return f"a malformed \\{c} escape"
        esc, end = "\\" + m.group(), m.end()
    elif c in "tnr\\\"[]-":
        esc, end = "\\" + c, i + 2
    elif c in "fv":
        esc, end = ("\\x0C" if c == "f" else "\\x0B"), i + 2
    elif c.isalnum() or c == "_":
        return f"the escape \\{c} (backreferences, word boundaries and the like)"
    else:  # escaped punctuation
        esc, end = (f"\\x{ord(c):02X}" if ord(c) < 0x80 else c), i + 2
    # Outside a class one character is written as a class of it: the converter would split a
    # multi-character escape where a quantifier follows, or apply the quantifier to it whole.
    return (esc if in_class else f"[{esc}]"), end


def pattern_gbnf(pattern: str) -> tuple[str | None, str, int]:
    """(`pattern` in the subset llama-cpp-python's converter writes as valid GBNF, "", its
    largest `{m,n}` count), or (None, why not, 0). The subset: anchored `^...$`, literals,
    `.`, classes, groups, `|`, `* + ?` and `{m,n}` up to REPEAT; `\\d \\w \\s` (and their
    negations outside a class), escaped punctuation and `(?:` are rewritten."""
    if len(pattern) > PATTERN_CHARS:
        return None, f"{len(pattern)} characters (over {PATTERN_CHARS})", 0
    try:
        re.compile(pattern)
    except re.error as e:
        return None, f"not a valid regular expression ({e})", 0
    if not (pattern.startswith("^") and pattern.endswith("$")) or pattern.endswith("\\$"):
        return None, "not anchored at both ends (^...$)", 0
    body, out, i, most = pattern[1:-1], [], 0, 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            got = _escape(body, i, in_class=False)
            if isinstance(got, str):
                return None, got, 0
            out.append(got[0])
            i = got[1]
        elif c == "[":
            j, cls = i + 1, ["["]
            if body.startswith("^", j):
                cls.append("^")
                j += 1
            while j < len(body) and body[j] != "]":
                if body[j] == "\\":
                    got = _escape(body, j, in_class=True)
                    if isinstance(got, str):
                        return None, got, 0
                    cls.append(got[0])
                    j = got[1]
                elif body[j] == "[":
                    return None, "a '[' inside a character class", 0
                else:
                    cls.append(body[j])
                    j += 1
            out.append("".join(cls) + "]")
            i = j + 1
        elif c == "(" and body.startswith("(?", i):
            if not body.startswith("(?:", i):
                return None, "lookarounds, named groups or flags ('(?')", 0
            out.append("(")
            i += 3
        elif c in "^$":
            return None, f"'{c}' inside the pattern", 0
        elif c == "{":
            m = _QUANT.match(body, i)
            if not m or not (m.group(1) or m.group(3)):
                return None, "a '{' that is not a {m,n} count", 0
            n = max(int(m.group(1) or 0), int(m.group(3) or 0))
            if n > REPEAT:
                return None, f"the count {m.group()} (over {REPEAT})", 0
            most = max(most, n)
            out.append(m.group())
            i = m.end() + body.startswith("?", m.end())  # lazy: the same strings match
        elif c in "*+?" and body.startswith("?", i + 1):
            out.append(c)  # a lazy quantifier matches the same strings as the greedy one
            i += 2
        elif c in "*+?" and body.startswith("+", i + 1):
            return None, "a possessive quantifier", 0
        else:
            out.append(c)
            i += 1
    return "^" + "".join(out) + "$", "", most
