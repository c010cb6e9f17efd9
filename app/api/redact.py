"""Local paths out of what a client is told: `without_paths` and `client_error`.

An error a client receives never names a local path: a replay file, a model, a template, a
cache file is named by its file name only, and the server's own log keeps the full text (one
line, when anything was taken out). What counts as a local path: an absolute POSIX path whose
first folder exists on this machine (`/home/...`, `/tmp/...`; not an API path such as
`/v1/chat/completions`, nor the path part of a URL), or a Windows drive path. Pure functions,
any thread.
"""

from __future__ import annotations

import logging
import os
import re

from app.api.errors import APIError

log = logging.getLogger("prism")

# An absolute path not inside a word or a URL (`http://host/x`): starts after a space, a
# quote, a bracket or the start; runs to a space, a quote, a bracket, a comma or the end.
_POSIX = re.compile(r"(?<![\w:/.~-])(/[^\s'\"()\[\]<>,;/]+(?:/[^\s'\"()\[\]<>,;/]*)*)")
_WINDOWS = re.compile(r"(?<![\w])([A-Za-z]:\\[^\s'\"()\[\]<>,;]*)")


def _name(path: str, sep: str) -> str:
    core = path.rstrip(".:")  # a sentence's full stop, a "path: why" colon stay as they were
    parts = [p for p in core.split(sep) if p]
    return (parts[-1] if parts else core) + path[len(core):]


def _local(path: str) -> bool:
    first = path.split("/", 2)[1]
    return bool(first) and os.path.isdir("/" + first) and path.count("/") >= 2


def without_paths(text: str) -> str:
    """`text` with each local path replaced by its last component (the file's name)."""
    out = _POSIX.sub(lambda m: _name(m[1], "/") if _local(m[1]) else m[1], text)
    out = _WINDOWS.sub(lambda m: _name(m[1], "\\"), out)
    if out != text:
        log.warning("[prism] an error names local paths; the client is told the file names "
                    "only. In full: %s", text)
    return out


def client_error(err: APIError) -> APIError:
    """The error with local paths taken out of its message (the same error when none)."""
    message = without_paths(err.message)
    if message == err.message:
        return err
    return APIError(err.kind, message, param=err.param, code=err.code, headers=err.headers)
