"""A pytest plugin that counts what the `attack` tests tried and how each attempt ended.

Loaded by scripts/attack.sh (`-p attack_plugin`). Every command an attack test runs in-process
(typer's CliRunner.invoke) is one attempt:

- a clear error: a nonzero exit with exactly one `error:` line (or click's one `Error:` line for an
  option it rejects) and no exception; anything else nonzero is an unclear error, listed;
- a right result: exit 0 (the test itself asserts the figure or the saved data);
- a traceback: an exception other than SystemExit, or "Traceback" in the output.

Files changed: each attempt hashes the input files named on its command line (not --out, --html, --db
targets) before and after, and the shared fixtures are hashed before and after the session. Runs lost:
failed tests marked `attack(saves=True)` (those that check a run is in the database or in a file). An
attack test that calls a library function and passes counts as one right result (or one clear error when
it is named `*refused*`, `*fails*`, `*says*`, `*error*`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

OUTPUT_OPTIONS = {"--out", "-o", "--output", "--html", "--db", "--profile-dir", "--json"}
FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"
COUNTS = dict.fromkeys(
    ["tried", "clear errors", "right results", "tracebacks", "files changed", "runs lost"], 0
)
FAILED: list[str] = []
UNCLEAR: list[str] = []  # nonzero exits without one clear line (printed, to be fixed)
_state: dict[str, Any] = {"invoked": 0}


def _hash(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "-"


def _inputs(args: Any) -> list[Path]:
    out, skip = [], False
    for a in args if isinstance(args, list | tuple) else []:
        if skip:
            skip = False
            continue
        if a in OUTPUT_OPTIONS:
            skip = True
            continue
        try:
            p = Path(str(a))
            if p.is_file():
                out.append(p)
        except (OSError, ValueError):
            continue
    return out


def _fixture_hashes() -> dict[Path, str]:
    return {p: _hash(p) for p in sorted(FIXTURES.rglob("*")) if p.is_file()}


def pytest_configure(config: pytest.Config) -> None:
    from typer.testing import CliRunner

    real = CliRunner.invoke

    def invoke(self: CliRunner, app: Any, args: Any = None, *rest: Any, **kwargs: Any) -> Any:
        inputs = {p: _hash(p) for p in _inputs(args)}
        result = real(self, app, args, *rest, **kwargs)
        _state["invoked"] += 1
        COUNTS["tried"] += 1
        changed = sum(1 for p, h in inputs.items() if _hash(p) != h)
        COUNTS["files changed"] += changed
        output = getattr(result, "output", "")
        if (result.exception is not None and not isinstance(result.exception, SystemExit)) or (
            "Traceback" in output
        ):
            COUNTS["tracebacks"] += 1
        elif result.exit_code == 0:
            COUNTS["right results"] += 1
        else:
            # ours (`error: …`), or click's usage error (`Error: Invalid value for '--gate' …`)
            errors = [line for line in output.splitlines() if line.startswith(("error:", "Error: "))]
            if len(errors) == 1:
                COUNTS["clear errors"] += 1
            else:
                COUNTS["unclear errors"] = COUNTS.get("unclear errors", 0) + 1
                UNCLEAR.append(f"{args}: exit {result.exit_code}: {output[-300:]!r}")
        return result

    CliRunner.invoke = invoke  # type: ignore[method-assign]
    _state["fixtures"] = _fixture_hashes()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    before = _state["invoked"]
    outcome = yield
    if _state["invoked"] == before:  # a library-level attack: the test is the attempt
        COUNTS["tried"] += 1
        if outcome.excinfo is None:
            clear = any(w in item.name for w in ("refused", "fails", "says", "error"))
            COUNTS["clear errors" if clear else "right results"] += 1
        elif not issubclass(outcome.excinfo[0], AssertionError):
            COUNTS["tracebacks"] += 1


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.failed:
        FAILED.append(report.nodeid)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("attack")
        item.user_properties.append(("saves", bool(marker and marker.kwargs.get("saves"))))


def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> None:
    if call.when == "call" and call.excinfo is not None and dict(item.user_properties).get("saves"):
        COUNTS["runs lost"] += 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    after = _fixture_hashes()
    COUNTS["files changed"] += sum(1 for p, h in _state["fixtures"].items() if after.get(p) != h)
    write = terminalreporter.write_line
    write("")
    write("attacks:")
    for key, value in COUNTS.items():
        write(f"  {key:<14} {value}")
    for line in UNCLEAR[:5]:
        write(f"  unclear: {line}")
    if FAILED:
        write(f"  failed tests   {len(FAILED)}: {', '.join(FAILED[:10])}")
