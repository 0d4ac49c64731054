"""Shared fixtures: the real nsys exports in ../shared, a throwaway results database, the nsys binary; and
how a clone without ../shared reports the tests that need it (one line each, and a count at the end)."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest

from harness.profilers.capture import save as save_run

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "fixtures"  # the fixture corpus: beside the checkout, not in it
SHARED_NSYS = CORPUS / "nsys"
A100_DIR = SHARED_NSYS / "a100-saxpy-mpi"
CPU_DIR = SHARED_NSYS / "cpu-train"
H100_DIR = SHARED_NSYS / "h100-medium"
# every nsys export of the corpus, by its folder under SHARED_NSYS
EXTERNAL = ("beast1", "dlprof_norelu", "fuser_report1", "llama3_realsim", "torchrun_2gpu", "weatherbench2")
NSYS_EXPORTS = ["a100-saxpy-mpi", "cpu-train", *(f"ext/{n}" for n in EXTERNAL)]
# the project's own `harness run medium --nsys` on an H100 (nsys 2023.4, 30,528 kernels): with `nsys stats`
# oracles of 2022.4 (expected/) and 2023.4 (expected-2023.4/), and the run's record (run.json)
# `nsys stats` of 2023.4.4 for every export above (tests/oracles/README.md says how they were made)
ORACLES = REPO / "tests" / "oracles"
# the words every "fixture missing" line carries: the report hooks below find them by it
NEEDS_CORPUS = "from the fixture corpus"


def missing(reason: str) -> NoReturn:
    """Skip a test whose outside requirement is missing, or fail it under CI (HARNESS_CI=1, set by .ci/run):
    there a skip would let a feature go untested while the run stays green."""
    if os.environ.get("HARNESS_CI") == "1":
        pytest.fail(f"CI requires it: {reason}", pytrace=False)
    pytest.skip(reason)


def corpus_reason(path: Path | str) -> str:
    """What a test needs of the corpus, and where the corpus is expected: `needs nsys/cpu-train/report.sqlite
    from the fixture corpus, expected at /x/shared/fixtures (beside the checkout)`."""
    path = Path(path)
    name = path.relative_to(CORPUS) if path.is_relative_to(CORPUS) else path
    return f"needs {name} {NEEDS_CORPUS}, expected at {CORPUS} (beside the checkout)"


def need(path: Path) -> Path:
    """`path`, a file or folder of the fixture corpus; where it is missing the test is skipped (failed under
    CI) with one line naming it and where the corpus belongs."""
    if not path.exists():
        missing(corpus_reason(path))
    return path


def shared_export(name: str) -> Path:
    """The nsys export of the corpus folder `name` (`ext/beast1`), `need`ed."""
    return need(SHARED_NSYS / name / "report.sqlite")


def corpus_cases(cases: list[Any], arguments: int, where: Path) -> list[Any]:
    """`cases` read from the corpus folder `where`, for `parametrize`; without the corpus one case of
    `where` alone, which the test `need`s: it is reported as every other (pytest would say "got empty
    parameter set")."""
    if cases or CORPUS.exists():
        return cases
    return [pytest.param(*[where] * arguments, id="no-corpus")]


@pytest.fixture(scope="session")
def a100_export() -> Path:
    """Real A100 export (nsys 2022.2, schema 2.9.1), with `nsys stats` CSVs in expected/."""
    return need(A100_DIR / "report.sqlite")


@pytest.fixture(scope="session")
def cpu_export() -> Path:
    """Real CPU-only export (nsys 2022.4, schema 3.0.0) of a small training loop with NVTX phases."""
    return need(CPU_DIR / "report.sqlite")


@pytest.fixture(scope="session")
def h100_export() -> Path:
    """The project's own `harness run medium --nsys` on an H100, recorded and exported by nsys 2023.4."""
    return need(H100_DIR / "report.sqlite")


@pytest.fixture(scope="session")
def h100_captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The GPU captures kept in the repository (tests/data/h100/*.sqlite.xz), unpacked once per session,
    read-only, by name (`tiny-cupti13`, `tiny-generate`, …)."""
    import lzma
    import shutil

    folder = tmp_path_factory.mktemp("h100-captures")
    found = {}
    for packed in sorted((REPO / "tests" / "data" / "h100").glob("*.sqlite.xz")):
        path = folder / packed.name.removesuffix(".xz")
        with lzma.open(packed) as src, path.open("wb") as out:
            shutil.copyfileobj(src, out)
        path.chmod(0o444)
        found[path.name.removesuffix(".sqlite")] = path
    return found


@pytest.fixture(scope="session")
def a100_expected() -> Path:
    return need(A100_DIR / "expected")


@pytest.fixture(scope="session")
def cpu_expected() -> Path:
    return need(CPU_DIR / "expected")


@pytest.fixture(scope="session")
def broken_h100(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Copies of h100-medium broken as real GPUs break captures (export_data.broken_captures), made once per
    session: the export is 20 MB."""
    from export_data import broken_captures

    return broken_captures(need(H100_DIR / "report.sqlite"), tmp_path_factory.mktemp("broken-h100"))


@pytest.fixture(autouse=True, scope="session")
def _cache_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Tests never write to the user's cache or data folders: one trace cache for the whole session (one
    per pytest-xdist worker), and the default results database in a folder of its own."""
    os.environ["HARNESS_CACHE_DIR"] = str(tmp_path_factory.mktemp("trace-cache"))
    os.environ["XDG_DATA_HOME"] = str(tmp_path_factory.mktemp("data-home"))


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A trace cache of the test's own (empty, no size limit from the environment)."""
    root = tmp_path / "cache"
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(root))
    monkeypatch.delenv("HARNESS_CACHE_LIMIT", raising=False)
    return root


@pytest.fixture(autouse=True, scope="session")
def _stats_format() -> None:
    """The tables print in the format of the nsys installed (analysis.tables.stats_format): tests pin
    2022.4's,
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


@dataclass(frozen=True)
class NsysRun:
    db: str  # the results database holding the run, alone
    run_id: str
    profile_dir: Path
    stdout: str
    stderr: str


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_db: str, nsys_bin: str) -> Path:
    """A run's working folder (its nsys_profiles/ land there), its own database and the nsys of the tests."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARNESS_NSYS", nsys_bin)
    return tmp_path


@pytest.fixture(scope="session")
def nsys_tiny(tmp_path_factory: pytest.TempPathFactory, nsys_bin: str) -> NsysRun:
    """One `harness run tiny --nsys` (2 measured steps, no baseline run) for the tests that only read it:
    one capture per session, not one per test. Those tests share the xdist group "nsys-tiny", so that under
    pytest-xdist they run on one worker and it is made once there too."""
    from typer.testing import CliRunner

    from harness.cli import app

    folder = tmp_path_factory.mktemp("nsys-tiny")
    db = f"sqlite:///{folder / 'results.sqlite'}"
    args = ["run", "tiny", "--device", "cpu", "--steps", "2", "--warmup", "1", "--nsys", "--no-nsys-baseline"]
    result = CliRunner().invoke(
        app,
        [*args, "--profile-dir", str(folder / "profiles"), "--db", db],
        env={"HARNESS_NSYS": nsys_bin},
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    from harness.store.results import ResultsStore

    (run_id,) = ResultsStore(db, readonly=True).runs()["run_id"]
    return NsysRun(db, run_id, folder / "profiles", result.stdout, result.stderr)


_CORPUS_PATH = re.compile(re.escape(str(CORPUS)) + r"[^\s'\"),;:]*")


def _corpus_error(outcome: Any) -> None:
    """A test (or its set-up) that opened a corpus file in a clone without the corpus: one skip line naming
    the file (a failure under CI), not a FileNotFoundError from deep inside the test."""
    error = outcome.excinfo
    said = (pytest.skip.Exception, pytest.fail.Exception)  # a test's own skip or failure: kept
    if error is None or CORPUS.exists() or isinstance(error[1], said):
        return
    found = _CORPUS_PATH.search(str(error[1]))
    if found is None:
        return
    why = corpus_reason(found.group())
    if os.environ.get("HARNESS_CI") == "1":
        outcome.force_exception(pytest.fail.Exception(f"CI requires it: {why}", pytrace=False))
    else:
        outcome.force_exception(pytest.skip.Exception(why))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):  # type: ignore[no-untyped-def]
    _corpus_error((yield))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):  # type: ignore[no-untyped-def]
    _corpus_error((yield))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """A skip for want of the corpus is reported at the test, with the test's name: not at the helper or
    hook that raised it (`pluggy/_execution.py:64`)."""
    report = (yield).get_result()
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and NEEDS_CORPUS in longrepr[2]:
        path, line = item.reportinfo()[:2]
        reason = longrepr[2].removeprefix("Skipped: ")
        name = getattr(item, "originalname", item.name)
        report.longrepr = (os.fspath(path), (line or 0) + 1, f"{name}: {reason}")


_missing: list[str] = []  # the tests skipped (failed under CI) for want of the corpus


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Under xdist this runs in the main process, which gets every worker's reports."""
    text = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr or "")
    if (report.skipped or report.failed) and NEEDS_CORPUS in text:
        _missing.append(report.nodeid)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    count = len(set(_missing))
    if count:
        terminalreporter.write_line(
            f"{count} test{'s' * (count != 1)} need the fixture corpus: put it at {CORPUS} "
            "(../shared/fixtures beside the checkout; docs/dev/fixtures.md says what it holds)",
            yellow=True,
            bold=True,
        )


def measure_drift(store: Any, like: Any, runs: int = 4, spread: float = 0.005) -> list[str]:
    """Store `runs` copies of the run `like` (a RunResult) made together, one experiment, each run's steps
    moved by a few `spread`s (0, +s, −s, +2s, …): the drift between runs of its configuration measured, as
    `harness run … --repeats N` measures it. Their ids."""
    import copy

    ids = []
    for i in range(runs):
        run = copy.deepcopy(like)
        run.run_id = f"{like.run_id}-drift-{i}"
        scale = 1 + spread * ((i + 1) // 2) * (1 if i % 2 else -1)
        for s in run.steps:
            s.phases = {p: round(ns * scale) for p, ns in s.phases.items()}
        save_run(store, run, experiment="repeats-drift")
        ids.append(run.run_id)
    return ids


@pytest.fixture
def series_maps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every pandas Series mapped (`Series.map`, as names are looked up by id) while the test
    runs: a table that maps a column as long as its rows shows there."""
    import pandas as pd

    lengths: list[int] = []
    series_map = pd.Series.map
    monkeypatch.setattr(
        pd.Series, "map", lambda self, *a, **k: lengths.append(len(self)) or series_map(self, *a, **k)
    )
    return lengths


@pytest.fixture
def sigint_raises() -> Iterator[None]:
    """SIGINT raising KeyboardInterrupt, as Python sets it up in a foreground process. pytest started as a
    background job (`make test &`, nohup, some CI runners) inherits SIGINT ignored, and Python leaves it
    so, as does the harness: a test that sends this process SIGINT to stop what it runs takes this."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
