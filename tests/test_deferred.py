"""harness.core.deferred: `with deferred(): import X` binds X without running it; the first name asked of
it runs it, once; a package hands out its submodules without running its own code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _fresh(code: str, tmp_path: Path) -> list[str]:
    """`code` in a fresh interpreter with a package `pkg` (tmp_path/pkg) importable as one of ours."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False,
        env={"PYTHONPATH": f"{REPO}:{tmp_path}", "PATH": ""}, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """workloads/ as a package whose code says when it runs (a copy of nothing of ours)."""
    pkg = tmp_path / "workloads"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("print('ran-package')\nNAME = 'package'\n")
    (pkg / "leaf.py").write_text("print('ran-leaf')\nVALUE = 42\n")
    (pkg / "broken.py").write_text("raise RuntimeError('boom')\n")
    return tmp_path


def test_a_deferred_module_runs_on_first_use_only(planted: Path) -> None:
    out = _fresh(
        "from harness.core.deferred import deferred\n"
        "with deferred():\n    from workloads import leaf\n"
        "print('imported')\nprint(leaf.VALUE)\nprint(leaf.VALUE)\n",
        planted,
    )
    assert out == ["imported", "ran-leaf", "42", "42"]  # the package's own code never ran


def test_a_deferred_package_runs_when_a_name_of_its_own_is_asked(planted: Path) -> None:
    out = _fresh(
        "import sys\nfrom harness.core.deferred import deferred\n"
        "with deferred():\n    import workloads\n"
        "print(workloads.__name__, 'imported')\nprint(workloads.NAME)\n"
        "print(type(sys.modules['workloads']).__name__)\n",
        planted,
    )
    assert out == ["workloads", "imported", "ran-package", "package", "module"]


def test_a_module_that_fails_fails_at_first_use_and_is_not_kept(planted: Path) -> None:
    out = _fresh(
        "import sys\nfrom harness.core.deferred import deferred\n"
        "with deferred():\n    from workloads import broken\n"
        "try:\n    broken.x\nexcept RuntimeError as e:\n    print(e)\n"
        "print('workloads.broken' in sys.modules)\n",
        planted,
    )
    assert out == ["boom", "False"]


def test_outside_deferred_imports_are_plain() -> None:
    from harness.core import deferred

    assert deferred._FINDER not in sys.meta_path
    with deferred.deferred():
        assert sys.meta_path[0] is deferred._FINDER
    assert deferred._FINDER not in sys.meta_path
