"""The front door and the user guide: a README read in one sitting whose links lead somewhere, a site whose
navigation holds every page, a command reference that is the app's own --help, and product text that
speaks of the product only."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("command_reference", REPO / "scripts" / "command_reference.py")
assert _spec and _spec.loader
command_reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(command_reference)

README = REPO / "README.md"
DOCS = REPO / "docs"
# wording of a development log, not of a product: numbered work items, the rounds of a review, the people
DEVELOPMENT_LOG = re.compile(
    r"issue [0-9]+|\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth) stop\b"
    r"|other\s+engineers",
    re.IGNORECASE,
)
PRODUCT_TEXT = ["README.md", "docs", "harness", "analysis", "workloads", "scripts", "tests"]
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def test_the_readme_is_read_in_one_sitting() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines"
    text = README.read_text()
    # the tour reaches a GPU capture's kernels, the advice and the dashboard with the demo's files
    for command in ("harness kernels demo/h100-tiny.sqlite", "harness advise demo/h100-tiny.sqlite",
                    "harness dashboard", "make demo", "make test"):  # fmt: skip
        assert command in text, command
    assert "CUDA kernels in h100-tiny.sqlite" in text and "Findings in h100-tiny.sqlite" in text


def test_every_link_of_the_readme_and_the_guide_leads_to_a_file() -> None:
    pages = [README, *sorted(DOCS.rglob("*.md"))]
    broken = []
    for page in pages:
        for target, _ in LINK.findall(page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert broken == []


def nav_pages() -> set[str]:
    """The pages mkdocs.yml's nav names (its `Title: page.md` lines)."""
    nav = (REPO / "mkdocs.yml").read_text().split("\nnav:\n", 1)[1]
    return set(re.findall(r":\s+(\S+\.md)\s*$", nav, re.MULTILINE))


def test_every_docs_page_named_in_the_code_and_the_guide_is_there() -> None:
    """A page named by its path (docs/ and its name, in a comment, a message, a page) exists: pages move."""
    missing = []
    for path in product_files():
        if path.suffix not in (".py", ".md", ".sh", ".toml", ".c", ".yml"):
            continue
        for named in sorted(set(re.findall(r"\bdocs/[\w./-]+\.md\b", path.read_text(errors="replace")))):
            if not (REPO / named).is_file():
                missing.append(f"{path.relative_to(REPO)}: {named}")
    assert missing == []


def test_the_site_navigation_holds_every_page_and_only_pages_that_exist() -> None:
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    listed = nav_pages()
    assert listed - pages == set(), "in the nav, no such page"
    assert pages - listed == set(), "a page left out of the nav"
    assert {"index.md", "getting-started.md", "reference/commands.md", "reference/api.md"} <= listed


def test_the_command_reference_is_the_apps_help() -> None:
    page = command_reference.PAGE.read_text()
    assert page == command_reference.render(), (
        "docs/reference/commands.md: python scripts/command_reference.py"
    )
    # every command, under the panel `harness --help` shows it in
    assert "## Read an export\n\n### harness kernels\n" in page
    assert "Example: harness kernels " in page


def test_the_api_reference_is_written_from_the_notebook_door() -> None:
    page = (DOCS / "reference" / "api.md").read_text()
    assert "::: analysis.front.notebook.open" in page and "::: analysis.front.notebook.Report" in page


def test_the_notebook_page_is_what_its_cells_print() -> None:
    script = REPO / "scripts" / "notebook_page.py"
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    page = (DOCS / "notebook.md").read_text()
    assert "report.findings()" in page and "gpu-host-wait           104502609" in page


def product_files() -> list[Path]:
    files = []
    for name in PRODUCT_TEXT:
        root = REPO / name
        found = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        files += [p for p in found if "__pycache__" not in p.parts]
    return files


def test_the_product_speaks_of_itself_only() -> None:
    found = []
    for path in product_files():
        data = path.read_bytes()
        if b"\0" in data:  # binary: a capture, a picture
            continue
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if DEVELOPMENT_LOG.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:100]}")
    assert found == []


def test_the_development_log_pattern_finds_what_it_is_for() -> None:
    # each written in two pieces, so that this file is not a finding itself
    for line in ("as issue " + "35 asked", "the Eighth" + " stop (quiet)", "other " + "engineers"):
        assert DEVELOPMENT_LOG.search(line), line
    assert not DEVELOPMENT_LOG.search("the first step stops the run; an issue with 3 kernels")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="the docs extra is not installed")
def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "reference" / "api" / "index.html").read_text().count("front.open") >= 1
