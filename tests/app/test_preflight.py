"""app/preflight.py: a chat template that does not compile stops the start-up at once, with
where the template came from, the line number and the line (issue 10, item 8)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.preflight import check_template
from engine.chat.packs import resolve_pack

GOOD = resolve_pack("qwen3-xml", require_model=False)


def test_a_template_that_compiles_passes_through():
    assert check_template(GOOD) is GOOD


def test_a_syntax_error_names_the_origin_the_line_and_its_text():
    broken = replace(GOOD, template="{{ bos_token }}\n{% for m in messages %}\n{{ m.content }\n",
                     template_origin="/models/broken.jinja")
    with pytest.raises(SystemExit) as info:
        check_template(broken)
    msg = str(info.value.code)
    assert msg.startswith("prism: the chat template (/models/broken.jinja) does not compile: "
                          "line 3: ")
    assert "\n     3 | {{ m.content }\n" in msg
    assert msg.endswith("Fix the template, or give one with --pack (a built-in or a directory).")


def test_a_long_line_is_cut_and_a_pack_without_origin_is_named():
    line = "{{ x " + "y" * 300
    with pytest.raises(SystemExit) as info:
        check_template(replace(GOOD, template=line, template_origin=""))
    msg = str(info.value.code)
    assert f"(pack {GOOD.name})" in msg
    assert f"| {line[:200]} ...\n" in msg
