"""The manual: its generated pages (scripts/gen_docs.py) hold what the argument parsers and the
family registry hold, the hand-written family tables name exactly the registered families, and
the README's and the nav's links resolve. `make test` also builds the site with
`mkdocs build --strict`, which checks every page's links and anchors."""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path

import pytest
import yaml
from markdown.extensions.toc import slugify

from engine.parse.families import NAMES, REGISTRY, detect_order

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _load_gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gen_docs = _load_gen_docs()


def _table_rows(markdown: str) -> list[list[str]]:
    """The body rows of every table, as cells (a `|` in a code span escaped as `\\|`)."""
    rows = []
    for line in markdown.splitlines():
        if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line):
            rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


def _code_spans(cell: str) -> list[str]:
    return [m.group(2).strip().replace("\\|", "|") for m in re.finditer(r"(`+)(.+?)\1", cell)]


def test_cli_reference_holds_each_verbs_help_and_every_option():
    from app import cli

    page = gen_docs.cli_markdown()
    helps = gen_docs.verb_help()
    assert set(helps) == set(cli.VERBS)
    for verb, text in helps.items():
        assert f"## prism {verb}\n\n```text\n{text}\n```" in page
    # Independently of how the page is made: every option of every verb is on it (those
    # hidden from --help aside).
    for verb, parser in gen_docs.verb_parsers().items():
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:
                continue
            for opt in action.option_strings:
                assert opt in helps[verb], (verb, opt)
    assert cli._usage() in page


def test_families_reference_has_one_row_per_family_in_detection_order():
    rows = [r for r in _table_rows(gen_docs.families_markdown()) if r[0] != "#"]
    names = [_code_spans(r[1])[0] for r in rows]
    assert names == [f.name for f in detect_order()]
    assert set(names) == set(REGISTRY)
    for row, fam in zip(rows, detect_order(), strict=True):
        pack = _code_spans(row[7])
        assert pack == ([fam.pack] if fam.pack else []), fam.name
        spans = _code_spans(row[4])
        assert spans == (list(fam.reasoning) if fam.reasoning else []), fam.name
        assert [s.replace("\\n", "\n") for s in _code_spans(row[5])] == [
            c.strip() for c in fam.markers.calls], fam.name
        for marker in fam.detect:
            assert marker.strip() in [s.strip() for s in _code_spans(row[3])], fam.name


def _family_tables() -> dict[str, set[str]]:
    """Family names in the first column of the guide's hand-written `--family` tables."""
    found: dict[str, set[str]] = {}
    for page in ("parser.md", "families.md"):
        in_table = False
        for line in (DOCS / page).read_text(encoding="utf-8").splitlines():
            if not line.startswith("|"):
                in_table = False
                continue
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            if "--family" in cells[0]:
                in_table = True
            elif in_table and not re.match(r"^[-: ]+$", cells[0]):
                found.setdefault(page, set()).update(_code_spans(cells[0]))
    return found


def test_hand_written_family_tables_name_exactly_the_registered_families():
    tables = _family_tables()
    assert set(tables) == {"parser.md", "families.md"}
    named = set().union(*tables.values())
    assert named - set(NAMES) == set(), "a table names a family the registry does not have"
    missing = set(REGISTRY) - named
    assert not missing, (f"families without a row in docs/parser.md or docs/families.md: "
                         f"{sorted(missing)}")


def test_generated_pages_are_rewritten_only_when_they_change(tmp_path: Path):
    written = gen_docs.write(tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == [
        "reference/cli.md", "reference/families.md"]
    # An unchanged page is left alone, so `mkdocs serve` (which watches docs/) does not loop.
    assert gen_docs.write(tmp_path) == []
    (tmp_path / "reference" / "cli.md").write_text("stale", encoding="utf-8")
    assert gen_docs.write(tmp_path) == [tmp_path / "reference" / "cli.md"]
    assert (tmp_path / "reference" / "cli.md").read_text(encoding="utf-8") == \
        gen_docs.cli_markdown()


def test_table_pipes_are_unescaped_in_code_spans_on_table_rows_only():
    md = "a `x\\|y` b\n| `<\\|channel\\|>` | c \\| d |\n"
    assert gen_docs.unescape_table_pipes(md) == "a `x\\|y` b\n| `<|channel|>` | c \\| d |\n"


def test_list_item_blocks_are_indented_for_python_markdown():
    md = ("- one\n  more of one\n\n  ```sh\n  run\n  ```\n\n  after the block\n- two\n"
          "text\n\n```\n- not an item\n  kept\n```\n")
    assert gen_docs.indent_list_items(md) == (
        "- one\n    more of one\n\n    ```sh\n    run\n    ```\n\n    after the block\n\n"
        "- two\ntext\n\n```\n- not an item\n  kept\n```\n")


def _headings(path: Path, slug) -> set[str]:
    out, fence = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"^#{1,6} (.*)$", line)
        if m:
            out.add(slug(m.group(1)))
    return out


def _github_slug(title: str) -> str:
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def _mkdocs_slug(title: str) -> str:
    return slugify(re.sub(r"[`*]", "", title), "-")


def test_readme_links_resolve():
    readme = ROOT / "README.md"
    links = re.findall(r"\]\(([^)\s]+)\)", readme.read_text(encoding="utf-8"))
    local = [u for u in links if not re.match(r"^[a-z]+:", u)]
    assert local, "the README links to the manual"
    for url in local:
        path, _, anchor = url.partition("#")
        target = ROOT / path if path else readme
        assert target.exists(), url
        if anchor:
            slug = _github_slug if target == readme else _mkdocs_slug
            assert anchor in _headings(target, slug), url


@pytest.fixture(scope="module")
def mkdocs_config() -> dict:
    class _Loader(yaml.SafeLoader):
        pass

    # mkdocs.yml may use mkdocs' own tags (`!ENV`); read them as plain values.
    _Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    return yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Loader)


def _nav_files(nav) -> list[str]:
    out = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        out += _nav_files(value) if isinstance(value, list) else [value]
    return out


def test_nav_lists_every_page_and_the_generator_is_a_hook(mkdocs_config):
    nav = _nav_files(mkdocs_config["nav"])
    assert "scripts/gen_docs.py" in mkdocs_config["hooks"]
    generated = set(gen_docs.pages())
    written = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert set(nav) == written | generated
    assert "design.md" in nav
