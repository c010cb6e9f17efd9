"""What a catalog serves: the GGUF files of `--models-dir` and `--model`, and their presets.

Owns `ModelOptions` (per-model settings a presets file gives; None: the command line's),
`ModelSpec` (one model: its id, its files, its size, its names, pin and ttl), `scan_dir`
(every `*.gguf` in a folder and one level of subfolders; the parts of a multi-part GGUF,
`name-00001-of-00003.gguf`, as one model loaded from its first part), `read_presets` (the
`--models-preset` TOML) and `specs_for` (the files and the presets together, ids unique).
Pure file-system reads, no model is loaded; runs on the main thread at start-up.

A presets file has one table per model, keyed by the model's file stem (or naming a file
of its own with `model = "path.gguf"`):

    [SmolLM2-135M-Instruct.Q4_1]
    alias = "small"              # the id clients use instead of the file's stem
    aliases = ["titles"]         # further names that route to it
    n_ctx = 2048
    parallel = 2
    threads = 2
    pack = "smollm2"             # or template = "path/to/chat_template.jinja"
    family = "hermes-json"
    flash_attn = "off"
    pin = true                   # never evicted
    ttl = 600                    # unloaded after 600 s without a request
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

_PART = re.compile(r"^(?P<stem>.+)-(?P<i>\d{5})-of-(?P<n>\d{5})$")
_OPTION_TYPES = {"n_ctx": int, "parallel": int, "threads": int, "pack": str, "template": str,
                 "family": str, "flash_attn": str}
_KEYS = set(_OPTION_TYPES) | {"alias", "aliases", "pin", "ttl", "model"}


class CatalogError(ValueError):
    """A models folder, file or presets file that cannot be used (said in one line)."""


@dataclass(frozen=True, slots=True)
class ModelOptions:
    """Per-model settings; None keeps the command line's."""

    n_ctx: int | None = None
    parallel: int | None = None
    threads: int | None = None
    pack: str | None = None
    template: str | None = None
    family: str | None = None
    flash_attn: str | None = None


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One model of the catalog. `path` is what llama.cpp loads (a multi-part GGUF's first
    part); `size` is every part's bytes together."""

    id: str
    path: Path
    size: int
    parts: tuple[Path, ...] = ()
    aliases: tuple[str, ...] = ()
    pin: bool = False
    ttl: float | None = None  # seconds idle before it is unloaded; None: never
    options: ModelOptions = field(default_factory=ModelOptions)

    @property
    def names(self) -> tuple[str, ...]:
        return (self.id, *self.aliases)


def _spec(first: Path, parts: list[Path], stem: str) -> ModelSpec:
    parts = sorted(parts)
    return ModelSpec(id=stem, path=first, size=sum(p.stat().st_size for p in parts),
                     parts=tuple(parts))


def group_files(files: list[Path]) -> list[ModelSpec]:
    """GGUF files as models: the parts of one split model become one, named without the
    `-0000i-of-0000n` suffix and loaded from part 1 (a split missing its first part is left
    out: llama.cpp cannot load it)."""
    singles: list[ModelSpec] = []
    split: dict[tuple[Path, str], list[Path]] = {}
    for f in sorted(files):
        m = _PART.match(f.stem)
        if m:
            split.setdefault((f.parent, m["stem"]), []).append(f)
        else:
            singles.append(_spec(f, [f], f.stem))
    for (_, stem), parts in split.items():
        first = [p for p in parts if _PART.match(p.stem)["i"] == "00001"]  # type: ignore[index]
        if first:
            singles.append(_spec(first[0], parts, stem))
    return singles


def scan_dir(folder: Path) -> list[ModelSpec]:
    """Every `*.gguf` in `folder` and in its subfolders one level down."""
    if not folder.is_dir():
        raise CatalogError(f"--models-dir {folder}: not a folder")
    files = [p for p in (*folder.glob("*.gguf"), *folder.glob("*/*.gguf")) if p.is_file()]
    return group_files(files)


def read_presets(path: Path) -> dict[str, dict]:
    """The presets file's tables, checked: known keys of the right types."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise CatalogError(f"--models-preset {path}: {e}") from None
    out: dict[str, dict] = {}
    for name, table in data.items():
        if not isinstance(table, dict):
            raise CatalogError(f"--models-preset {path}: [{name}] must be a table of settings")
        if "dialect" in table:  # the key's name before the concept was called a family
            old = {k: v for k, v in table.items() if k != "dialect"}
            table = {"family": table["dialect"], **old}
        unknown = set(table) - _KEYS
        if unknown:
            raise CatalogError(f"--models-preset {path}: [{name}] has unknown settings "
                               f"{', '.join(sorted(unknown))} (known: {', '.join(sorted(_KEYS))})")
        for key, kind in (*_OPTION_TYPES.items(), ("alias", str), ("model", str),
                          ("pin", bool)):
            value = table.get(key)
            if value is not None and (not isinstance(value, kind)
                                      or (kind is int and isinstance(value, bool))):
                raise CatalogError(f"--models-preset {path}: [{name}] {key} must be a "
                                   f"{kind.__name__}, not {value!r}")
        ttl = table.get("ttl")
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float))
                                or ttl <= 0):
            raise CatalogError(f"--models-preset {path}: [{name}] ttl is seconds, above 0")
        aliases = table.get("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise CatalogError(f"--models-preset {path}: [{name}] aliases is a list of names")
        out[name] = table
    return out


def _apply(spec: ModelSpec, table: dict, base: Path) -> ModelSpec:
    opts = {f.name: table[f.name] for f in fields(ModelOptions) if f.name in table}
    if "template" in opts:  # relative to the presets file, as its `model`
        opts["template"] = str((base / opts["template"]).expanduser())
    alias = table.get("alias")
    aliases = tuple(table.get("aliases", ()))
    return replace(spec, id=alias or spec.id,
                   aliases=((spec.id,) if alias else ()) + aliases,
                   pin=bool(table.get("pin", False)), ttl=table.get("ttl"),
                   options=ModelOptions(**opts))


def specs_for(models_dir: Path | None, model_files: list[Path],
              presets: Path | None = None) -> list[ModelSpec]:
    """The catalog's models: the folder's, then each `--model` file, then each preset that
    names a file of its own; presets applied by file stem. Every name routes to one model."""
    specs = scan_dir(models_dir) if models_dir is not None else []
    for f in model_files:
        if not f.is_file():
            raise CatalogError(f"--model {f}: no such file")
        specs += group_files([f])
    tables = read_presets(presets) if presets is not None else {}
    base = presets.parent if presets is not None else Path.cwd()
    by_stem = {s.id: i for i, s in enumerate(specs)}
    for name, table in tables.items():
        if "model" in table:
            f = (base / table["model"]).expanduser()
            if not f.is_file():
                raise CatalogError(f"--models-preset: [{name}] model {f}: no such file")
            spec = replace(group_files([f])[0], id=name)
            by_stem[name] = len(specs)
            specs.append(spec)
        if name not in by_stem:
            raise CatalogError(f"--models-preset: [{name}] names no model (the models are "
                               f"{', '.join(sorted(by_stem)) or 'none'})")
        specs[by_stem[name]] = _apply(specs[by_stem[name]], table, base)
    seen: dict[str, str] = {}
    for s in specs:
        for n in s.names:
            if n in seen:
                raise CatalogError(f"two models answer to {n!r} ({s.path.name} and "
                                   f"{seen[n]}); give one an alias in --models-preset")
            seen[n] = s.path.name
    if not specs:
        raise CatalogError("no GGUF files found: --models-dir holds no *.gguf")
    return specs
