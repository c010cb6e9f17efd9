"""Start-up checks that must fail at once, with a message a person can act on.

Owns `check_template(pack)`: the chat template is compiled right after the pack is resolved,
before the model loads (which takes seconds to minutes), and a syntax error is printed with the
template's origin, the line number and the line itself. Before, a GGUF whose template did not
compile loaded the whole model and then died with a traceback (issue 10, item 8). Runs on the
main thread at start-up, for the `gui` and `serve` verbs alike (app/config.py).
"""

from __future__ import annotations

from engine.chat.packs import Pack
from engine.chat.template import TemplateError


def template_error(pack: Pack, exc: TemplateError) -> str:
    """The message for a template that does not compile: where it came from, what is wrong,
    and the offending line."""
    origin = pack.template_origin or f"pack {pack.name}"
    cause = exc.__cause__
    lineno = getattr(cause, "lineno", None)
    what = getattr(cause, "message", None) or str(exc)
    lines = pack.template.splitlines()
    msg = f"prism: the chat template ({origin}) does not compile"
    if lineno:
        msg += f": line {lineno}: {what}"
        if 0 < lineno <= len(lines):
            text = lines[lineno - 1]
            msg += f"\n  {lineno:>4} | {text[:200]}{' ...' if len(text) > 200 else ''}"
    else:
        msg += f": {what}"
    return msg + "\nFix the template, or give one with --pack (a built-in or a directory)."


def check_template(pack: Pack) -> Pack:
    """Compile the pack's chat template now; SystemExit with the error if it does not."""
    try:
        pack.chat_template()
    except TemplateError as e:
        raise SystemExit(template_error(pack, e)) from None
    return pack
