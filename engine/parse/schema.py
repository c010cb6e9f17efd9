"""Schema typing of tool-call values: which JSON types a parameter allows, and the raw text of a
value read as one of them.

Owns the one reading of a tool's `parameters` JSON schema that the call families need: the set
of JSON types a parameter accepts (through `type` strings and lists, `anyOf` / `oneOf` /
`allOf`, local `$ref`s into `$defs` / `definitions`, `enum`, `const` and OpenAPI's `nullable`),
the names it declares, and `convert()`, which types one raw value. Pure functions; the one
state is `ToolSchemas`' memo of what they derive, one per parser. Run by whichever thread drives
the parser (docs/design.md, section 4 "The parser", rule 7).

Equivalent schemas resolve to the same type set, so they give the same arguments: the value is
typed by the set, never by how the schema spells it.

A union with a string (`["string", "integer"]`) keeps the raw text unless the text is exactly a
JSON value of one of the other types: `7` is 7 there, `007`, `7a` and `2 dollars` stay strings,
`1.5` stays a string where only integers are allowed (llama.cpp's rule for such unions, its
tests/test-chat.cpp `string_union_tool` cases; a Python literal is never taken where a string
is allowed).
"""

from __future__ import annotations

import ast
import json
import math

STRING, NULL, OBJECT, ARRAY = "string", "null", "object", "array"
JSON_TYPES = frozenset({STRING, "integer", "number", "boolean", NULL, OBJECT, ARRAY})
CONTAINERS = frozenset({OBJECT, ARRAY})
SCALARS = frozenset({"integer", "number", "boolean"})  # what a union with a string may read as
_NUMERIC = frozenset("0123456789+-.eE \t\r\n")  # every character a JSON number's text can hold

_MAX_DEPTH = 32  # $ref chains and nesting deeper than this are "unknown" (cycles end here too)
_MAX_LITERAL = 100_000  # longer values are never handed to ast.literal_eval


class ToolSchemas(dict):
    """Tool name -> parameters schema, as `engine.parse.families.common.tool_schemas` builds it once
    per parser and never changes it, with what `param_types` and `declared_params` derive from
    it remembered per (tool, parameter): they are asked for every value, and walking the schema
    per value showed in the parser bench (issue 8). A plain dict works the same, only
    uncached."""

    __slots__ = ("derived",)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.derived: dict[tuple, frozenset[str] | None] = {}


def tool_params(schemas: dict, tool: str | None) -> dict | None:
    """The tool's parameters schema with a top-level `$ref` followed, or None when unknown."""
    params = schemas.get(tool) if tool is not None else None
    if not isinstance(params, dict):
        return None
    return _follow(params, params)


def declared_params(schemas: dict, tool: str | None) -> frozenset[str] | None:
    """The parameter names the tool declares, or None when it has no schema (any name goes)."""
    if isinstance(schemas, ToolSchemas):
        return _memo(schemas, (tool,), _declared_params, tool)
    return _declared_params(schemas, tool)


def param_types(schemas: dict, tool: str | None, key: str) -> frozenset[str] | None:
    """The JSON types parameter `key` of `tool` accepts, or None when the schema does not say."""
    if isinstance(schemas, ToolSchemas):
        return _memo(schemas, (tool, key), _param_types, tool, key)
    return _param_types(schemas, tool, key)


def _memo(schemas: ToolSchemas, k: tuple, derive, *args) -> frozenset[str] | None:
    derived = schemas.derived
    if k in derived:
        return derived[k]
    out = derived[k] = derive(schemas, *args)
    return out


def _declared_params(schemas: dict, tool: str | None) -> frozenset[str] | None:
    params = tool_params(schemas, tool)
    props = params.get("properties") if params is not None else None
    return frozenset(props) if isinstance(props, dict) else None


def _param_types(schemas: dict, tool: str | None, key: str) -> frozenset[str] | None:
    params = tool_params(schemas, tool)
    props = params.get("properties") if params is not None else None
    sch = props.get(key) if isinstance(props, dict) else None
    if sch is None:
        return None
    return schema_types(sch, schemas.get(tool))


def schema_types(sch, root=None, depth: int = 0) -> frozenset[str] | None:
    """The JSON types `sch` accepts (None: unknown, any value). `$ref`s resolve against `root`.

    Every keyword that constrains the type contributes a set and the sets intersect; an
    `anyOf` / `oneOf` is the union of its branches (unknown if any branch is); a contradiction
    (an empty intersection) is unknown too, so a value is then typed as if there were no schema.
    """
    if not isinstance(sch, dict) or depth > _MAX_DEPTH:
        return None
    found: list[frozenset[str]] = []
    t = sch.get("type")
    if isinstance(t, str):
        found.append(frozenset({t}) & JSON_TYPES)
    elif isinstance(t, list):
        found.append(frozenset(x for x in t if isinstance(x, str)) & JSON_TYPES)
    ref = sch.get("$ref")
    if isinstance(ref, str):
        target = _resolve_ref(root, ref)
        sub = schema_types(target, root, depth + 1) if target is not None else None
        if sub is not None:
            found.append(sub)
    for key in ("anyOf", "oneOf"):
        branches = sch.get(key)
        if isinstance(branches, list) and branches:
            subs = [schema_types(b, root, depth + 1) for b in branches]
            if all(s is not None for s in subs):
                found.append(frozenset().union(*subs))
    parts = sch.get("allOf")
    if isinstance(parts, list):
        found += [s for s in (schema_types(p, root, depth + 1) for p in parts) if s is not None]
    if "enum" in sch and isinstance(sch["enum"], list) and sch["enum"]:
        found.append(frozenset(json_type(v) for v in sch["enum"]))
    if "const" in sch:
        found.append(frozenset({json_type(sch["const"])}))
    if not found:
        return None
    types = frozenset.intersection(*found)
    if sch.get("nullable") is True:
        types |= {NULL}
    return types or None


def json_type(v) -> str:
    """The JSON type name of a decoded value."""
    if v is None:
        return NULL
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return STRING
    if isinstance(v, list):
        return ARRAY
    if isinstance(v, dict):
        return OBJECT
    return "?"


def fits(v, types: frozenset[str]) -> bool:
    """Does the decoded value `v` have one of `types` (an integer is a number; 3.0 an integer)?"""
    t = json_type(v)
    if t in types:
        return True
    if t == "integer":
        return "number" in types
    return t == "number" and "integer" in types and math.isfinite(v) and float(v).is_integer()


def streams_raw(types: frozenset[str] | None) -> bool:
    """A value that is always the raw text, whatever it reads as (a string and nothing else)."""
    return types is not None and STRING in types and not (types - {STRING})


def raw_is_final(types: frozenset[str] | None, text: str) -> bool:
    """For a type set that allows a string and also null, a container or a scalar: once the
    value begins with `text` (one leading newline already stripped), is it sure to stay the
    raw string? Lets the family stream an `Optional[str]` value as it is written after a few
    characters."""
    if types is None or STRING not in types:
        return False
    if NULL in types and NULL.startswith(text):
        return False
    head = text.lstrip()
    if (types & CONTAINERS or types & SCALARS) and not head:
        return False
    if types & CONTAINERS and head[0] in "{[":
        return False
    if types & {"integer", "number"} and _NUMERIC.issuperset(head):
        return False
    word = head.rstrip()
    return not ("boolean" in types and ("true".startswith(word) or "false".startswith(word)))


def _scalar_fits(v, types: frozenset[str]) -> bool:
    """Is the decoded JSON `v` exactly a value of one of the scalar `types`? Strict, for a
    union with a string: `1e3` (a number) is not an integer there, `true` only a boolean."""
    t = json_type(v)
    return t in types & SCALARS or (t == "integer" and "number" in types)


def convert(raw: str, types: frozenset[str] | None) -> tuple[object, bool]:
    """Type one raw value; returns (value, repaired). `repaired` is True when the value was read
    as a Python literal (`True`, `None`, `{'k': 'v'}`) because it was not JSON.

    - No schema: JSON, falling back to the raw string.
    - A string allowed: the raw text, except exactly `null` when null is allowed (None), a
      JSON object / array when one is allowed, and a JSON number or boolean of an allowed
      type (`7` where an integer is allowed; see the module docstring).
    - Otherwise: JSON that fits the types; else a Python literal that fits (never `eval`);
      else JSON of another type; else the raw string.
    """
    if types is None:
        try:
            return _loads(raw), False
        except ValueError:
            return raw, False
    if STRING in types:
        if NULL in types and raw == NULL:
            return None, False
        if types & CONTAINERS and raw.lstrip()[:1] in ("{", "["):
            try:
                v = _loads(raw)
            except ValueError:
                return raw, False
            if fits(v, types):
                return v, False
        if types & SCALARS and raw.lstrip()[:1] in _SCALAR_HEADS:
            try:
                v = _loads(raw)
            except ValueError:
                return raw, False
            if _scalar_fits(v, types):
                return v, False
        return raw, False
    try:
        v, is_json = _loads(raw), True
    except ValueError:
        v, is_json = None, False
    if is_json and fits(v, types):
        return v, False
    lit = python_literal(raw)
    if lit is not _NOT and fits(lit, types):
        return lit, True
    return (v, False) if is_json else (raw, False)


_NOT = object()  # "not a literal" (None is a literal)
_SCALAR_HEADS = frozenset("-0123456789tf")  # how a JSON number or boolean begins


def _finite(s: str) -> float:
    v = float(s)
    if not math.isfinite(v):
        raise ValueError("not a finite number")
    return v


def _not_json(s: str):
    raise ValueError(f"{s} is not JSON")


# One decoder for every value (json.loads with hooks builds a new one per call).
_DECODER = json.JSONDecoder(parse_float=_finite, parse_constant=_not_json)


def _loads(raw: str):
    """json.loads without Python's extensions: `NaN`, `Infinity` and numbers too large for a
    float are not JSON, and json.dumps would write them back as invalid JSON."""
    return _DECODER.decode(raw)


def python_literal(raw: str):
    """`raw` read as a Python literal made of JSON-able values (tuples become lists), or _NOT."""
    s = raw.strip()
    if not s or len(s) > _MAX_LITERAL:
        return _NOT
    try:
        v = ast.literal_eval(s)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT
    return _jsonable(v, 0)


def _jsonable(v, depth: int):
    if depth > _MAX_DEPTH:
        return _NOT
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else _NOT
    if isinstance(v, (list, tuple)):
        out = [_jsonable(x, depth + 1) for x in v]
        return _NOT if any(x is _NOT for x in out) else out
    if isinstance(v, dict):
        d = {}
        for k, x in v.items():
            x = _jsonable(x, depth + 1)
            if not isinstance(k, str) or x is _NOT:
                return _NOT
            d[k] = x
        return d
    return _NOT  # sets, bytes, complex, Ellipsis: no JSON value


def _follow(sch: dict, root: dict, depth: int = 0) -> dict:
    """Follow a chain of `$ref`s at the top of `sch` (a parameters object written as a ref)."""
    while isinstance(sch.get("$ref"), str) and "properties" not in sch and depth < _MAX_DEPTH:
        target = _resolve_ref(root, sch["$ref"])
        if not isinstance(target, dict):
            break
        sch, depth = target, depth + 1
    return sch


def _resolve_ref(root, ref: str):
    """A local JSON pointer (`#`, `#/$defs/X`, `#/definitions/X`, any `#/a/b`) into root."""
    if not isinstance(root, dict) or not ref.startswith("#"):
        return None
    node = root
    for part in ref[1:].split("/")[1:] if ref != "#" else ():
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node if isinstance(node, dict) else None
