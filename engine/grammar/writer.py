"""The text of one forced-call grammar: literal text, special tokens as token references, text
that avoids a closer, JSON by schema through llama-cpp-python's converter, and key/value
parameters by schema.

Owns `Writer` and `excluding`. Each family writes its own call markup with a `Writer` (its
record's `grammar`, engine/parse/families/registry.py `CallGrammar`): the family modules stay
standard-library only because they are handed the writer and never import this module. Pure
text building on the caller's thread (the service's).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping

from engine.grammar.bounds import bound
from engine.grammar.json_schema import converter, gbnf_literal

NL = "\n"
PREFIX = "tc"  # every rule written here starts with it; the schema converter's rules do not


def _lit(text: str) -> str:
    return gbnf_literal(text)


def _cls(chars: set[str]) -> str:
    return "".join("\\" + c if c in "]\\^-" else c for c in sorted(chars))


def excluding(name: str, literal: str) -> dict[str, str]:
    """Rules `name0`... matching any text that does not contain `literal` (a KMP automaton:
    rule `nameK` means the text so far ends with the first K characters of `literal`)."""
    n = len(literal)

    def step(k: int, c: str) -> int:
        s = literal[:k] + c
        for j in range(min(len(s), n), 0, -1):
            if s.endswith(literal[:j]):
                return j
        return 0

    rules: dict[str, str] = {}
    alphabet = set(literal)
    for k in range(n):
        alts = ['""']
        for c in sorted(alphabet):
            to = step(k, c)
            if to < n:
                alts.append(f"{_lit(c)} {name}{to}")
        # every other character, and the literal's own characters that lead back to 0 are
        # already listed above, so the class is "none of the literal's characters"
        alts.append(f"[^{_cls(alphabet)}] {name}0")
        rules[f"{name}{k}"] = " | ".join(alts)
    return rules


def _params(fn: dict) -> dict:
    params = fn.get("parameters")
    return params if isinstance(params, dict) else {"type": "object"}


def _is_raw(schema: dict) -> bool:
    """Is this property written as raw text (a string) rather than JSON?"""
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return all(isinstance(e, str) for e in enum)
    return schema.get("type", "string") == "string"


class Writer:
    """One grammar being written: its rules, the schema converter's, and the markup's special
    tokens (text -> id) written as token references. `prefix` starts every rule name written
    here (the converter's never do); `lit` quotes a literal."""

    prefix = PREFIX
    nl = NL
    lit = staticmethod(_lit)

    def __init__(self, tokens: Mapping[str, int]) -> None:
        self.conv = converter()
        self.rules: dict[str, str] = {}
        self.where = "parameters"  # the schema being written, as the request names it
        self.relaxed: list[str] = []  # bounds not enforced while sampling (bounds.py)
        self._bounded: dict[int, dict] = {}  # id(tool function) -> its bounded parameters
        self.tokens = dict(tokens)
        alts = sorted(self.tokens, key=len, reverse=True)  # the longer token wins, as llama.cpp
        self._split = re.compile("|".join(map(re.escape, alts))) if alts else None
        self._untils: dict[str, str] = {}

    def seq(self, text: str) -> str:
        """GBNF for exactly `text`, each special token in it a token reference."""
        parts, i = [], 0
        for m in self._split.finditer(text) if self._split else ():
            if m.start() > i:
                parts.append(_lit(text[i:m.start()]))
            parts.append(f"<[{self.tokens[m.group()]}]>")
            i = m.end()
        if i < len(text):
            parts.append(_lit(text[i:]))
        return " ".join(parts) or '""'

    def until(self, closer: str, name: str = "") -> str:
        """A rule for any text that does not contain `closer` (the closer not included), its
        rules named `name`0... (else numbered)."""
        if closer not in self._untils:
            name = name or f"{PREFIX}-u{len(self._untils)}-"
            self.rules.update(excluding(name, closer))
            self._untils[closer] = f"{name}0"
        return self._untils[closer]

    def json(self, schema: dict, name: str, fallback: dict) -> str:
        """The converter's rule for JSON matching `schema` (`fallback`'s where it cannot),
        without the whitespace the converter allows after a value: where the arguments end
        the call (Mistral's), it would be answer text after the call."""
        bounded = bound(schema, self.where)
        self.relaxed.extend(bounded.relaxed)
        try:
            rule = self.conv.visit(self.conv.resolve_refs(copy.deepcopy(bounded.schema), name),
                                   name)
        except Exception:  # the converter raises assorted errors on schemas it does not cover
            self.conv._refs_being_resolved = set()  # a failed visit leaves its refs there
            rule = self.conv.visit(fallback, name + "-any")
        body = self.conv._rules.get(rule, "")  # the converter keeps its rules there
        if body.endswith(" space"):
            self.conv._rules[rule] = body[: -len(" space")]
        return rule

    # --- what the families' call grammars share --------------------------------------------

    def params(self, fn: dict) -> dict:
        """The tool's `parameters` schema (any object when it declares none), bounded
        (bounds.py: what a grammar cannot hold is relaxed, and noted in `relaxed`)."""
        got = self._bounded.get(id(fn))
        if got is None:
            bounded = bound(_params(fn), self.where)
            self.relaxed.extend(bounded.relaxed)
            got = self._bounded[id(fn)] = bounded.schema
        return got

    def props(self, fn: dict) -> tuple[list[tuple[str, dict]], set[str]]:
        """The declared properties in order, and the required ones."""
        params = self.params(fn)
        props = params.get("properties")
        items = [(k, v if isinstance(v, dict) else {}) for k, v in props.items()] \
            if isinstance(props, dict) else []
        required = params.get("required")
        return items, set(required) if isinstance(required, list) else set()

    def args(self, i: int, fn: dict) -> str:
        """JSON arguments for the i-th tool, by its schema."""
        return self.json(self.params(fn), f"{PREFIX}{i}-args", {"type": "object"})

    def raw(self, schema: dict, closer: str) -> str:
        """A raw (string) value: one of its enum, else any text without `closer`."""
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return "(" + " | ".join(_lit(e) for e in enum) + ")"
        return self.until(closer)

    def tagged(self, i: int, fn: dict, key_open: str, key_close, value_close: str,
               closer: str) -> str:
        """Key/value parameters for the declared properties, in order, the required ones
        always: `key_open K key_close(raw) VALUE value_close`; `closer` is the text a raw VALUE
        must not contain. A tool that declares no properties may name any keys (raw values)."""
        items, required = self.props(fn)
        if not items:
            key = f"{PREFIX}{i}-key"
            self.rules[key] = "[A-Za-z0-9_.-]+"
            one = (f"{self.seq(key_open)} {key} {self.seq(key_close(True))} "
                   f"{self.until(closer)} {self.seq(value_close)}")
            return f"({one})*"
        parts = []
        for j, (k, schema) in enumerate(items):  # bounded with the parameters (`params`)
            raw = _is_raw(schema)
            value = (self.raw(schema, closer) if raw
                     else self.json(schema, f"{PREFIX}{i}-p{j}", {}))
            one = f"{self.seq(key_open + k + key_close(raw))} {value} {self.seq(value_close)}"
            parts.append(f"({one})" + ("" if k in required else "?"))
        return " ".join(parts)
