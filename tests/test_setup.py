"""Setup as a newcomer meets it: packaging without deprecation warnings, `make setup` that says what it does,
and a developer guide (docs/dev/fixtures.md) that names the fixture corpus and the tests that need it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
from conftest import NEEDS_CORPUS

REPO = Path(__file__).resolve().parents[1]

# What a test file uses to reach ../shared/fixtures: the conftest fixtures and helpers that read it.
CORPUS_USES = re.compile(
    r"a100_export|cpu_export|h100_export|a100_expected|cpu_expected|SHARED_NSYS|SHARED_KINETO|kineto_data|golden_outputs"
    r"|\"shared\"|\.\./shared"
)


def test_pyproject_license_is_an_spdx_string_without_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    monkeypatch.chdir(REPO)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), "pyproject.toml")
    assert [str(w.message).splitlines()[0] for w in caught] == []
    assert dist.metadata.license_expression == "MIT"
    assert dist.metadata.license_files == ["LICENSE"]
    assert (REPO / "LICENSE").read_text().startswith("MIT License")


def test_make_setup_says_each_step_and_keeps_pip_progress_on_the_long_installs() -> None:
    if shutil.which("make") is None:
        pytest.skip("make not found")
    env = {**os.environ, "VENV": "/nonexistent-venv"}
    dry = subprocess.run(
        ["make", "-n", "-B", "/nonexistent-venv/.installed", "VENV=/nonexistent-venv"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.splitlines()
    steps = [line for line in dry if line.startswith('echo "setup ')]
    assert [s.split(":")[0] for s in steps] == [
        'echo "setup 1/4',
        'echo "setup 2/4',
        'echo "setup 3/4',
        'echo "setup 4/4',
    ]
    installs = [
        line
        for line in dry
        if "-m pip install" in line and "--upgrade pip" not in line and line[0] not in "e#"
    ]
    assert len(installs) == 2  # torch, then the harness and its dependencies
    assert all(" -q" not in line for line in installs)
    # each long install is announced by the line just before it
    for line in installs:
        assert dry[dry.index(line) - 1].startswith('echo "setup ')


def test_the_fixtures_page_names_the_corpus_and_every_test_that_needs_it() -> None:
    page = (REPO / "docs" / "dev" / "fixtures.md").read_text()
    section = page.split("## The test fixtures: `../shared/fixtures`", 1)[1].split("\n## ", 1)[0]
    assert "beside the checkout" in section
    # the skip line and the count at the end, as tests/conftest.py writes them
    joined = " ".join(section.split())
    assert f"{NEEDS_CORPUS}, expected at /home/me/shared/fixtures (beside the checkout)" in joined
    assert "tests need the fixture corpus: put it at" in joined
    needing = sorted(
        p.stem
        for p in (REPO / "tests").glob("test_*.py")
        if p.name != "test_setup.py" and CORPUS_USES.search(p.read_text())
    )
    named = set(re.findall(r"`([a-z_0-9]+)`", section))
    assert "golden" in named and "parity" in named
    assert [n for n in needing if n.removeprefix("test_") not in named] == []
