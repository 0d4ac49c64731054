"""Shared fixtures: the real nsys exports in ../shared, a throwaway results database, the nsys binary."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_NSYS = REPO.parent / "shared" / "fixtures" / "nsys"
A100_DIR = SHARED_NSYS / "a100-saxpy-mpi"
CPU_DIR = SHARED_NSYS / "cpu-train"
H100_DIR = SHARED_NSYS / "h100-medium"
# every nsys export of the corpus, by its folder under SHARED_NSYS
EXTERNAL = ("beast1", "dlprof_norelu", "fuser_report1", "llama3_realsim", "torchrun_2gpu", "weatherbench2")
NSYS_EXPORTS = ["a100-saxpy-mpi", "cpu-train", *(f"ext/{n}" for n in EXTERNAL)]
# the project's own `harness run medium --nsys` on an H100 (nsys 2023.4, 30,528 kernels): with `nsys stats`
# oracles of 2022.4 (expected/) and 2023.4 (expected-2023.4/), and the run's record (run.json)
H100_DIR = SHARED_NSYS / "h100-medium"
# `nsys stats` of 2023.4.4 for every export above (tests/oracles/README.md says how they were made)
ORACLES = REPO / "tests" / "oracles"


def missing(reason: str) -> NoReturn:
    """Skip a test whose outside requirement is missing, or fail it under CI (HARNESS_CI=1, set by .ci/run):
    there a skip would let a feature go untested while the run stays green."""
    if os.environ.get("HARNESS_CI") == "1":
        pytest.fail(f"CI requires it: {reason}", pytrace=False)
    pytest.skip(reason)


def _require(path: Path) -> Path:
    if not path.exists():
        missing(f"fixture {path} not found (../shared/fixtures beside the checkout)")
    return path


@pytest.fixture(scope="session")
def a100_export() -> Path:
    """Real A100 export (nsys 2022.2, schema 2.9.1), with `nsys stats` CSVs in expected/."""
    return _require(A100_DIR / "report.sqlite")


@pytest.fixture(scope="session")
def cpu_export() -> Path:
    """Real CPU-only export (nsys 2022.4, schema 3.0.0) of a small training loop with NVTX phases."""
    return _require(CPU_DIR / "report.sqlite")


@pytest.fixture(scope="session")
def h100_export() -> Path:
    """The project's own `harness run medium --nsys` on an H100, recorded and exported by nsys 2023.4."""
    return _require(H100_DIR / "report.sqlite")


@pytest.fixture(scope="session")
def a100_expected() -> Path:
    return _require(A100_DIR / "expected")


@pytest.fixture(scope="session")
def cpu_expected() -> Path:
    return _require(CPU_DIR / "expected")


@pytest.fixture(scope="session")
def broken_h100(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Copies of h100-medium broken as real GPUs break captures (export_data.broken_captures), made once per
    session: the export is 20 MB."""
    from export_data import broken_captures

    return broken_captures(_require(H100_DIR / "report.sqlite"), tmp_path_factory.mktemp("broken-h100"))


@pytest.fixture(autouse=True, scope="session")
def _cache_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Tests never write to the user's cache folder: one trace cache for the whole session."""
    os.environ["HARNESS_CACHE_DIR"] = str(tmp_path_factory.mktemp("trace-cache"))


@pytest.fixture(autouse=True, scope="session")
def _stats_format() -> None:
    """The tables print in the format of the nsys installed (analysis.stats_format): tests pin 2022.4's,
    the format of the shared oracles and the goldens, so that nothing they assert depends on which nsys
    this machine has. Tests of the other format or of `auto` set it themselves."""
    os.environ["HARNESS_STATS_FORMAT"] = "2022.4"


@pytest.fixture
def tmp_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh results database, also set as HARNESS_DB for commands run in-process."""
    url = f"sqlite:///{tmp_path / 'results.sqlite'}"
    monkeypatch.setenv("HARNESS_DB", url)
    return url


@pytest.fixture(scope="session")
def nsys_bin() -> str:
    from harness.core.errors import NsysError
    from harness.execution.nsys import find_nsys

    try:
        return str(find_nsys().path)  # the nsys the harness itself would use
    except NsysError:
        missing("nsys not found: `make setup` installs a project-local copy (scripts/install-nsys.sh)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):  # type: ignore[no-untyped-def]
    """A test that reads a shared fixture in a clone without ../shared: one skip line naming the folder
    (a failure under CI), not a FileNotFoundError from deep inside the test."""
    outcome = yield
    error = outcome.excinfo
    shared = SHARED_NSYS.parent.parent
    if error is not None and not shared.exists() and str(shared) in str(error[1]):
        why = f"fixtures not found: {shared} (beside the checkout)"
        if os.environ.get("HARNESS_CI") == "1":
            outcome.force_exception(pytest.fail.Exception(f"CI requires it: {why}", pytrace=False))
        else:
            outcome.force_exception(pytest.skip.Exception(why))
