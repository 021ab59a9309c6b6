"""The command pages and the README quote what the commands print (docs/commands/measure.py):
each output block, re-made by running its commands on the bundled Dante sample and the small
scenarios, equals the page's text. Times and peak RSS (the timed blocks) are re-made by
``measure.py --timed``, dated, and not checked here."""
from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def measure_module():
    spec = importlib.util.spec_from_file_location("doc_measure", ROOT / "docs/commands/measure.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod            # dataclasses look their module up while being made
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def measure():
    return measure_module()


def test_every_block_a_page_names_has_a_maker_and_every_maker_a_page(measure):
    named = {n for p in measure.pages() for n in measure.page_blocks(p.read_text(encoding="utf-8"))}
    assert named == set(measure.BLOCKS), (
        f"pages without maker: {sorted(named - set(measure.BLOCKS))}, "
        f"makers without page: {sorted(set(measure.BLOCKS) - named)}")


def test_the_pages_list_every_command_in_reading_order(measure):
    from tokenpcap.cli import main
    index = (measure.PAGES_DIR / "README.md").read_text(encoding="utf-8")
    pages = sorted(p.name for p in measure.PAGES_DIR.glob("[0-9][0-9]-*.md"))
    commands = [p[3:-3] for p in pages]
    assert sorted(commands) == sorted(main.list_commands(None)), "a page per command of `tokenpcap --help`"
    for k, page in enumerate(pages, 1):
        assert f"{k}. [{page[3:-3]}]({page})" in index, page


def test_a_changed_number_is_caught(measure, tmp_path):
    """The check is not vacuous: a page whose block differs by one digit from the command's
    output is reported with its name, and an unknown block too."""
    page = measure.PAGES_DIR / "08-compare.md"
    text = page.read_text(encoding="utf-8")
    body = measure.page_blocks(text)["compare-dante"]
    assert "560    560" in body
    changed = text.replace("560    560", "560    559", 1)
    ws = measure.Workspace.make(tmp_path / "ws")
    assert measure.check(ws, {page: text}) == []
    problems = measure.check(ws, {page: changed + "<!-- measured:nope -->1<!-- /measured:nope -->"})
    assert len(problems) == 2
    assert "compare-dante" in problems[0] and "-all                       560    559" in problems[0]
    assert "'nope' has no maker" in problems[1]


@pytest.mark.slow
def test_every_output_block_equals_a_fresh_run(measure, tmp_path):
    try:
        problems = measure.check(measure.Workspace.make(tmp_path / "ws"))
    finally:
        shutil.rmtree(tmp_path / "ws")      # the Dante run's 1.4 GB of captures
    assert not problems, ("pages differ from what the commands print; re-make them with "
                          "`python3 docs/commands/measure.py`:\n" + "\n\n".join(problems))


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation but ``-`` and ``_``
    dropped, each space a ``-`` (github/cmark-gfm's anchor filter)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_command_pages_links_reach_a_file_and_heading(measure):
    """Every relative link of a command page names a file of the tree and, with ``#anchor``, one
    of its headings (the topic docs change their headings: a broken link would go unnoticed)."""
    for page in sorted(measure.PAGES_DIR.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            assert dest.exists(), f"{page.name}: link {target}: no such file"
            if anchor:
                heads = re.findall(r"^#{1,6} (.+)$", dest.read_text(encoding="utf-8"), re.M)
                anchors = {github_anchor(h.replace("`", "")) for h in heads}
                assert anchor in anchors, f"{page.name}: link {target}: no such heading"
