"""What generated a recording: the model file, its quant, the family, the template and the engine.

Owns `ModelInfo` (the frozen record a recording's header keeps as `model_info`, and `/metrics`
reports as `prism_model_info`), `describe` (a pack and an engine to a `ModelInfo`) and
`template_hash`. The quant is the GGUF's `general.file_type` as llama.cpp names it
(engine/gguf.py, `quant_name`). Files written before the header held it read as `UNKNOWN` in each
field, except what their header already said (the upstream URL). Pure: called once, when the
recorder or the metrics route is built (the main thread), and by the ledger on any thread.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import asdict, dataclass
from typing import Any

from engine.chat.detect import format_label
from engine.chat.packs import Pack
from engine.gguf import GGUFError, quant_name, read_gguf_metadata

UNKNOWN = "unknown"
LOCAL = "local"  # the engine ran here (llama.cpp in this process)
REPLAY = "replay"  # a recording or a text file played back


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """file: the GGUF's file name (an upstream's model name); quant: its `general.file_type`
    name ("Q4_K_M"); family: the pack's tool-call family; template: the first 12 hex digits of
    the chat template's sha256; engine: "local", "replay" or the upstream's URL."""

    file: str = UNKNOWN
    quant: str = UNKNOWN
    family: str = UNKNOWN
    template: str = UNKNOWN
    engine: str = UNKNOWN

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_header(cls, header: dict[str, Any]) -> ModelInfo:
        """The info a recording's header holds; a field it lacks is UNKNOWN, but an older
        header's `upstream` still names the engine and its `model` the file."""
        raw = header.get("model_info")
        d = raw if isinstance(raw, dict) else {}
        engine = d.get("engine") or header.get("upstream") or UNKNOWN
        file = d.get("file") or header.get("model") or UNKNOWN
        return cls(file=str(file), quant=str(d.get("quant") or UNKNOWN),
                   family=str(d.get("family") or UNKNOWN),
                   template=str(d.get("template") or UNKNOWN), engine=str(engine))


def template_hash(pack: Pack) -> str:
    """The pack's chat template (and its tool-use template, when it has one) as 12 hex digits
    of their sha256: two recordings made with the same template group together."""
    source = pack.template + ("\0" + pack.tool_template if pack.tool_template else "")
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:12]


def family_name(pack: Pack) -> str:
    """The pack's family as a recording names it: a derived format with its record's
    description (`derived:python-list (derived from the template (python list in …))`), so that
    the ledger groups two derived formats of one shape apart."""
    if not pack.family:
        return UNKNOWN
    label = format_label(pack.family)
    return f"{pack.family} ({label})" if label != pack.family else pack.family


def describe(pack: Pack, engine: str = LOCAL, model: str = "") -> ModelInfo:
    """What `pack` run on `engine` ("local", "replay" or an upstream URL) generates with.
    `model` names the file when the pack has no GGUF (an upstream's model)."""
    file, quant = model or UNKNOWN, UNKNOWN
    if pack.gguf is not None:
        file = pack.gguf.name
        # A missing or damaged file: its quant is simply not known.
        with contextlib.suppress(GGUFError):
            quant = quant_name(read_gguf_metadata(pack.gguf).get("general.file_type"))
    return ModelInfo(file=file, quant=quant, family=family_name(pack),
                     template=template_hash(pack), engine=engine)
