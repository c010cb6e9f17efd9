"""Python-literal values as the python-list shape's calls write them: read safely, typed by
schema.

Owns `literal` (one value's text -> the value, through `ast.parse(mode="eval")` and
`ast.literal_eval`, never eval; JSON's true/false/null read too, sets as lists), `typed` (a
value for a parameter's schema types, with the repair it needed: an unquoted word for a string,
a zero-padded integer) and `normalize` (raw control characters in a string escaped). Standard
library only, no state; run by whichever thread drives the parser
(engine/parse/shapes/python_calls.py is the reader that calls it).
"""

from __future__ import annotations

import ast
import json
import re

from engine.parse.schema import STRING, fits

UNQUOTED = "unquoted string"  # repairs (repaired_call's text)
LEADING_ZERO = "zero-padded integer"
_STOP = {q: re.compile("[" + re.escape(q) + r"\\\n\r\x00]") for q in ("'", '"')}
_CONTROL = {"\n": "\\n", "\r": "\\r", "\x00": "\\x00"}
_VALID_ESCAPES = frozenset("\\'\"abfnrtv\n\r")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_HEX = {"x": 2, "u": 4, "U": 8}
_QUOTE = re.compile("['\"]")
_BARE = re.compile(r"[A-Za-z0-9_.+\-]+")  # a word the model left unquoted
_PADDED = re.compile(r"[+-]?0+[0-9]+")  # 07: an integer Python refuses
_NUMBERS = frozenset({"integer", "number"})
_JSON_WORDS = {"true": True, "false": False, "null": None}


# --- values -------------------------------------------------------------------------------------


class _Literals(ast.NodeTransformer):
    """JSON's `true` / `false` / `null` as constants, sets as lists (in source order)."""

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in _JSON_WORDS:
            return ast.copy_location(ast.Constant(_JSON_WORDS[node.id]), node)
        return node

    def visit_Set(self, node: ast.Set) -> ast.AST:
        self.generic_visit(node)
        return ast.copy_location(ast.List(node.elts, ast.Load()), node)


_NOT = object()  # "not a literal" (None is one)


def literal(text: str):
    """`text` read as one Python literal made of JSON values (tuples and sets become lists,
    keys become strings as json.dumps writes them), or _NOT."""
    try:
        node = _Literals().visit(ast.parse(text.strip(), mode="eval").body)
        value = ast.literal_eval(node)
        return json.loads(json.dumps(value, allow_nan=False))
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return _NOT


def typed(text: str, types: frozenset[str] | None) -> tuple[object, str | None]:
    """A value's text as its parameter takes it: (value, the repair it needed or None). Raises
    ValueError when it is no value.

    A literal that fits the schema (or any literal, without one) is the value. A bare word
    the schema types as a string is that text (`city=Paris`, `city=42`, `zip=02134`); a
    zero-padded integer (`month=07`, not Python) is the integer where a number goes or no
    schema says; any other bare word without a schema is its text."""
    value = literal(text)
    if value is not _NOT and (types is None or fits(value, types)):
        return value, None
    word = text.strip()
    bare = _BARE.fullmatch(word) is not None
    if bare and types is not None and STRING in types:
        return word, UNQUOTED
    if value is _NOT and _PADDED.fullmatch(word) and (types is None or types & _NUMBERS):
        return int(word), LEADING_ZERO
    if value is _NOT and bare and types is None:
        return word, UNQUOTED
    if value is _NOT:
        raise ValueError("not a Python literal: " + word[:40])
    return value, None


def normalize(text: str) -> tuple[str, bool]:
    """A value's text made parseable without a warning and its value unchanged: in a string, a
    backslash that starts no escape is doubled (Python keeps it, with a warning: `"\\d"` is
    `\\d`), and a raw line end in a one-line string becomes its escape (Python refuses it;
    models write it). Returns the text and whether it held such a line end (a repair). An octal
    escape past `\\377` raises ValueError (Python would warn, then read it)."""
    out: list[str] = []
    i, n = 0, len(text)
    quote, raw, line_end = "", False, False
    while i < n:
        if not quote:
            m = _QUOTE.search(text, i)
            j = m.start() if m else n
            out.append(text[i:j])
            if j >= n:
                break
            c = text[j]
            quote = c * 3 if text.startswith(c * 3, j) else c
            k = j
            while k > 0 and text[k - 1].isalpha():
                k -= 1
            raw = "r" in text[k:j].lower()
            out.append(quote)
            i = j + len(quote)
            continue
        m = _STOP[quote[0]].search(text, i)
        j = m.start() if m else n
        out.append(text[i:j])
        if j >= n:
            break
        c = text[j]
        if c == "\\":
            i = _escape(text, j, raw, out)
        elif c in _CONTROL:
            if len(quote) == 1 or c == "\x00":
                line_end = True
                c = _CONTROL[c]
            out.append(c)
            i = j + 1
        elif text.startswith(quote, j):
            out.append(quote)
            i = j + len(quote)
            quote = ""
        else:
            out.append(c)
            i = j + 1
    return "".join(out), line_end


def _escape(text: str, j: int, raw: bool, out: list[str]) -> int:
    """The backslash at text[j] inside a string, written to `out`; returns where to go on."""
    d = text[j + 1 : j + 2]
    if raw or (d and d in _VALID_ESCAPES):
        out.append(text[j : j + 2])
        return j + 2
    if d and d in "01234567":
        k = j + 1
        while k < min(len(text), j + 4) and text[k] in "01234567":
            k += 1
        if int(text[j + 1 : k], 8) > 0o377:
            raise ValueError("octal escape out of range")
        out.append(text[j:k])
        return k
    width = _HEX.get(d, 0)
    digits = text[j + 2 : j + 2 + width]
    if width and len(digits) == width and all(ch in _HEX_DIGITS for ch in digits):
        out.append(text[j : j + 2 + width])
        return j + 2 + width
    if d == "N" and text.startswith("{", j + 2):
        out.append(text[j : j + 2])
        return j + 2
    out.append("\\\\")  # no escape: the backslash is kept, as Python keeps it
    return j + 1


