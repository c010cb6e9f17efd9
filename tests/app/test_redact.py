"""app/api/redact.py and the one place every error body passes (app/api/errors.py
`error_response`): a client is never told a local path, whatever raised the error."""

from __future__ import annotations

import json

import pytest

from app.api.errors import APIError, error_response
from app.api.redact import without_paths


@pytest.mark.parametrize("text, told", [
    ("replay: the next output (/tmp/x/session.jsonl) holds a call",
     "replay: the next output (session.jsonl) holds a call"),
    ("cannot read /home/someone/models/m.gguf: truncated", "cannot read m.gguf: truncated"),
    ("POST /v1/chat/completions refused", "POST /v1/chat/completions refused"),
    ("see http://127.0.0.1:8421/v1/models", "see http://127.0.0.1:8421/v1/models"),
    (r"cannot open C:\Users\me\m.gguf", "cannot open m.gguf"),
    ("no path at all", "no path at all"),
])
def test_local_paths_become_file_names(text, told):
    assert without_paths(text) == told


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/health"])
def test_every_error_body_is_redacted_in_either_dialect(tmp_path, path):
    where = tmp_path / "cache" / "x.kv"
    resp = error_response(path, APIError("unavailable", f"The model failed to load: {where}"))
    body = json.loads(resp.body)
    text = json.dumps(body)
    assert str(tmp_path) not in text and "x.kv" in text
