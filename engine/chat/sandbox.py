"""The sandbox chat templates render in: transformers' rules, with llama.cpp's few allowances.

Owns `ENV` (the one jinja2 environment every `ChatTemplate` compiles in), `freeze` (what a
template is given, as read-only copies) and `Raised` (a template's own `raise_exception`).
The environment is transformers' immutable sandbox (`trim_blocks`, `lstrip_blocks`,
`loopcontrols`, its `tojson`, `raise_exception`, `strftime_now`), except that `append` and `pop`
work on the lists the template builds itself (Kimi K2's `namespace(ids=[])`), capped at
jinja's MAX_RANGE items; everything it is given stays read-only, and the CVE-2024-34359
escapes stay refused (tests/engine/chat/test_template_compat.py). Built once at import; a
compiled template is immutable, so any thread may render with it (engine/chat/template.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import MAX_RANGE, SandboxedEnvironment, SecurityError, modifies_known_mutable


class Raised(jinja2.TemplateError):
    """What `raise_exception(...)` throws inside a template, told apart from jinja's own."""


def _listed(x: Any) -> list:
    """json.dumps' fallback: an iterable that is no string or mapping (a `map`/`select`
    generator, a set) is written as a list; anything else stays an error, as in transformers."""
    if isinstance(x, Iterable) and not isinstance(x, (str, bytes, Mapping, jinja2.Undefined)):
        return list(x)
    raise TypeError(f"Object of type {type(x).__name__} is not JSON serializable")


def _tojson(x: Any, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    # transformers replaces jinja's tojson, which HTML-escapes `<>&'` and would change prompts.
    # Unlike transformers', it takes a generator (`tools | map(attribute='function') | tojson`,
    # llama.cpp's DeepSeek R1 template), as llama.cpp's jinja does.
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys,
        default=_listed,
    )


def _raise_exception(message: str) -> None:
    raise Raised(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _GenerationTag(Extension):
    """`{% generation %}…{% endgeneration %}`: transformers uses it to mark assistant tokens for
    training masks. Rendering only needs the body, so the tag is accepted and dropped."""

    tags = {"generation"}  # noqa: RUF012 (jinja's Extension API wants a plain class attribute)

    def parse(self, parser: Any) -> list[nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class _Undefined(jinja2.Undefined):
    """Plain `Undefined`, except that a value the sandbox refused cannot be printed, iterated
    or tested: `{{ ''.__class__ }}` raises instead of rendering as nothing."""

    __slots__ = ()

    def _refuse_unsafe(self) -> None:
        if self._undefined_exception is SecurityError:
            self._fail_with_undefined_error()

    def __str__(self) -> str:
        self._refuse_unsafe()
        return super().__str__()

    def __iter__(self):  # type: ignore[override]
        self._refuse_unsafe()
        return super().__iter__()

    def __bool__(self) -> bool:
        self._refuse_unsafe()
        return super().__bool__()

    def __len__(self) -> int:
        self._refuse_unsafe()
        return super().__len__()


class _Namespace(jinja2.utils.Namespace):
    """`namespace()` that refuses underscore names, as transformers' does: a template must not
    reach the namespace's own storage (`_Namespace__attrs`) through `{% set ns._x = … %}`."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # jinja's signature trick, kept
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise SecurityError(f"a template may not set {name!r} on a namespace")


class _Dict:
    """The `dict` global without the type object behind it (transformers does the same)."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


# The mutators a template may call on a list it built itself: all that the 71 templates of
# llama.cpp's library call (Kimi K2's `ids.append(...)` and `ids.pop(0)`); none on dicts.
_OWN_MUTATORS: dict[type, frozenset[str]] = {list: frozenset({"append", "pop"})}


def _own_mutator(obj: Any, attr: str) -> bool:
    """`obj.attr` is a mutator allowed on `obj`: a plain `list` (exactly that type: what the
    template gets from outside is a `_ReadOnlyList`), and one of `_OWN_MUTATORS`."""
    allowed = _OWN_MUTATORS.get(type(obj))
    return allowed is not None and attr in allowed


class _Sandbox(SandboxedEnvironment):
    """ImmutableSandboxedEnvironment, except for `_OWN_MUTATORS` on the template's own lists.
    Everything SandboxedEnvironment refuses (underscore and internal attributes, `str.format`
    escapes, unsafe callables) stays refused; so do all other mutators (sets, dicts, deques,
    `sort` with a key function) and every mutator on what the template was given."""

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if not super().is_safe_attribute(obj, attr, value):
            return False
        return not modifies_known_mutable(obj, attr) or _own_mutator(obj, attr)

    def is_safe_callable(self, obj: Any) -> bool:
        # The same rule on the bound method itself, however the template came by it.
        owner = getattr(obj, "__self__", None)
        name = getattr(obj, "__name__", None)
        if (owner is not None and isinstance(name, str) and modifies_known_mutable(owner, name)
                and not _own_mutator(owner, name)):
            return False
        return super().is_safe_callable(obj)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        # A list a template grows is capped as `range` is (MAX_RANGE): appending to the list a
        # loop walks would otherwise never end.
        owner = getattr(__obj, "__self__", None)
        if (type(owner) is list and getattr(__obj, "__name__", None) == "append"
                and len(owner) >= MAX_RANGE):
            raise SecurityError(f"a template's list may not grow past {MAX_RANGE} items")
        return super().call(__context, __obj, *args, **kwargs)


class _ReadOnlyList(list):
    """A list the template was given: the sandbox lets it call no mutator on it."""

    __slots__ = ()


class _ReadOnlyDict(dict):
    """A dict the template was given: the sandbox lets it call no mutator on it."""

    __slots__ = ()


def freeze(x: Any) -> Any:
    """A copy of template input whose lists and dicts are read-only to the sandbox (slicing or
    `| list` gives the template plain copies, which it may then change)."""
    if isinstance(x, dict):
        return _ReadOnlyDict({k: freeze(v) for k, v in x.items()})
    if isinstance(x, list):
        return _ReadOnlyList(freeze(v) for v in x)
    if isinstance(x, tuple):
        return tuple(freeze(v) for v in x)
    return x


def _make_env() -> _Sandbox:
    env = _Sandbox(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[loopcontrols, _GenerationTag],
        undefined=_Undefined,
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _Dict()
    env.globals["namespace"] = _Namespace
    return env


# One environment for all templates: it holds no per-render state, and jinja's environment is
# safe to share between threads once configured.
ENV = _make_env()
