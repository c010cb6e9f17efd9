"""app/preflight.py: a chat template that does not compile stops the start-up at once, with
where the template came from, the line number and the line (issue 10, item 8)."""

from __future__ import annotations

import re
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


# -- a template given with --template must render; a model file must be whole ----------------


def test_a_template_that_fails_to_render_names_the_line_it_fails_on():
    from app.preflight import check_renders

    broken = replace(GOOD, template="{% for m in messages %}\n{{ m.content }}\n"
                     "{{ undefined_fn() }}\n{% endfor %}", template_origin="/models/t.jinja")
    with pytest.raises(SystemExit) as info:
        check_renders(broken)
    msg = str(info.value.code)
    assert msg.startswith("prism: the chat template (/models/t.jinja) fails on a one-message "
                          "conversation: line 3: 'undefined_fn' is undefined\n"
                          "     3 | {{ undefined_fn() }}\n")
    refusing = replace(broken, template="a\nb\n{{ raise_exception('no system role') }}")
    with pytest.raises(SystemExit, match=r"conversation: line 3: no "
                                         r"system role\n     3 \| "):
        check_renders(refusing)
    assert check_renders(GOOD) is GOOD


def test_a_whole_model_passes_and_one_byte_short_is_named(default_model, tmp_path):
    from app.preflight import check_model

    assert check_model(default_model) == default_model
    size = default_model.stat().st_size
    short = tmp_path / "short.gguf"
    with default_model.open("rb") as src:
        short.write_bytes(src.read(size - 1))  # the last tensor's last byte is missing
    with pytest.raises(SystemExit) as info:
        check_model(short)
    assert str(info.value.code) == (
        f"prism: cannot load the model: {short} is truncated: {size - 1:,} bytes of the "
        f"{size:,} its tensors take (a download or copy cut short?)")
    head = tmp_path / "head.gguf"  # cut inside the metadata itself
    head.write_bytes(short.read_bytes()[:2000])
    with pytest.raises(SystemExit, match="^" + re.escape(
            f"prism: cannot load the model: cannot read GGUF {head}: ")):
        check_model(head)
