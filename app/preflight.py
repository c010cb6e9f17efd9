"""Start-up checks that must fail at once, with a message a person can act on.

Owns `check_template(pack)`: the chat template is compiled right after the pack is resolved,
before the model loads (which takes seconds to minutes), and a syntax error is printed with the
template's origin, the line number and the line itself. Before, a GGUF whose template did not
compile loaded the whole model and then died with a traceback. `check_renders(pack)` goes one
step further for a template the user gave (`--template FILE`): it renders a one-message
conversation, so a template that compiles but fails on every request (an undefined function,
a bad expression) is named with its line too, before the model loads. `check_model(path)`
reads a GGUF's header and tensor table, so a model file cut short (a download interrupted) is
one line naming it, not llama.cpp's load failure and a traceback. Runs on the main thread at
start-up, for every verb that builds a service (app/config.py).
"""

from __future__ import annotations

from pathlib import Path

from engine.chat.packs import Pack
from engine.chat.request import Message
from engine.chat.template import TemplateError
from engine.gguf import GGUFError, check_complete

PROBE = (Message("user", "Hello."),)  # the least any chat template must render


def _template_line(exc: BaseException) -> int | None:
    """The template line an error points at: a syntax error's own, else the innermost frame
    of the compiled template in the traceback (jinja maps those to template lines)."""
    cause = exc.__cause__
    lineno = getattr(cause, "lineno", None)
    if lineno:
        return lineno
    tb = cause.__traceback__ if cause is not None else None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            lineno = tb.tb_lineno
        tb = tb.tb_next
    return lineno


def template_error(pack: Pack, exc: TemplateError, what_fails: str = "does not compile") -> str:
    """The message for a template that does not compile (or render): where it came from,
    what is wrong, and the offending line."""
    origin = pack.template_origin or f"pack {pack.name}"
    cause = exc.__cause__
    lineno = _template_line(exc)
    what = getattr(cause, "message", None) or str(exc)
    lines = pack.template.splitlines()
    msg = f"prism: the chat template ({origin}) {what_fails}"
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


def check_renders(pack: Pack) -> Pack:
    """Compile the template and render a one-message conversation with it; SystemExit with
    the error and its line if either fails."""
    template = check_template(pack).chat_template()
    try:
        template.render(PROBE)
    except TemplateError as e:
        raise SystemExit(template_error(pack, e, "fails on a one-message conversation")) \
            from None
    return pack


def check_model(path: Path) -> Path:
    """SystemExit naming the file when it is not a GGUF llama.cpp could load whole (not one,
    or cut short); the path when it is."""
    try:
        check_complete(path)
    except GGUFError as e:
        raise SystemExit(f"prism: cannot load the model: {e}") from None
    return path
