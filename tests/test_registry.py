"""The profilers are listed once (harness.profilers.registry): their names, the CLI's --profiler choices and
the renderer of each outcome come from there, and a profiler's name is its module's."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import render, run
from harness.core.errors import UsageError
from harness.profilers import registry


def test_each_profiler_is_named_as_its_module() -> None:
    assert registry.NAMES == ("none", "nsys", "torch")
    for name, module in zip(registry.NAMES, registry.MODULES, strict=True):
        assert registry.get(name).name == name == module.__name__.rpartition(".")[2]
    assert registry.get(None).name == "none"
    with pytest.raises(UsageError, match="unknown profiler 'perf'; known: none, nsys, torch"):
        registry.get("perf")


def test_the_cli_choices_are_the_registry() -> None:
    assert [p.value for p in run.Profiler] == [n for n in registry.NAMES if n != "none"]


def test_every_profiler_has_the_whole_contract() -> None:
    for name in registry.NAMES:
        profiler = registry.get(name)
        for part in (
            "wraps",
            "keeps",
            "default_dir",
            "check",
            "preflight",
            "progress",
            "run",
            "overhead_runs",
        ):
            assert hasattr(profiler, part), (name, part)


def test_an_outcome_with_no_renderer_of_its_own_is_shown_plainly(capsys: pytest.CaptureFixture[str]) -> None:
    from dataclasses import dataclass, field

    from harness.profilers.base import Outcome

    @dataclass
    class Newcomer(Outcome):  # what a new profiler's run might hand back
        result: None = None
        artifacts: dict[str, str] = field(default_factory=lambda: {"trace": str(Path("t.json"))})
        notes: list[str] = field(default_factory=list)
        unsaved: list[str] = field(default_factory=list)
        error: str | None = None
        exit_code: int = 1

    render.render(Newcomer(), "table")
    assert "trace: t.json" in capsys.readouterr().err


NEWCOMER = '''"""A profiler as a newcomer writes it: its own options, declared here, built from the command
line."""
import json
from dataclasses import dataclass, field
from pathlib import Path

from harness.core.records import RunResult, StepRecord
from harness.profilers.base import Outcome, ProfilerOptions
from harness.profilers.capture import save as save_run


@dataclass(frozen=True)
class PerfOptions(ProfilerOptions):
    profile_dir: Path = Path("perf_profiles")
    force: bool = field(default=False, metadata={"cli": "nsys_force"})  # an option it shares with nsys


@dataclass
class PerfRun(Outcome):
    result: RunResult | None = None
    notes: list = field(default_factory=list)
    unsaved: list = field(default_factory=list)
    error: str | None = None
    exit_code: int = 1


class PerfProfiler:
    name = "perf"
    wraps = "nothing (a test's profiler)"
    keeps = ("perf_data",)
    default_dir = Path("perf_profiles")

    def check(self, config, device_type):
        pass

    def options_from(self, args):
        return PerfOptions.from_cli(args, self.default_dir)

    def preflight(self, options, device_type):
        return []

    def progress(self, config):
        return "perf", None

    def overhead_runs(self, config, options, modes):
        return []

    def run(self, config, options, *, store, progress):
        options.profile_dir.mkdir(parents=True, exist_ok=True)
        data = options.profile_dir / "perf.data"
        data.write_text(json.dumps({"options": type(options).__name__, "force": options.force}))
        steps = [StepRecord(step=0, warmup=False, phases={"forward": 1000, "backward": 2000, "optimizer": 3})]
        result = RunResult(run_id="tiny-perf", config=config, status="ok", device="cpu", steps=steps)
        save_run(store, result, profiler=self.name, artifacts={"perf_data": str(data)})
        return PerfRun(result=result)


PROFILER = PerfProfiler()
'''

DRIVER = """import sys
from datetime import UTC, datetime
from pathlib import Path

import perf
from harness.profilers import registry

# the one registry line: `MODULES = (none, nsys, torch, perf)`, its names following
registry.MODULES = (*registry.MODULES, perf)
registry.NAMES = tuple(m.__name__.rpartition(".")[2] for m in registry.MODULES)

from typer.testing import CliRunner

from harness.cli import app
from harness.core.records import RunConfig, RunResult, StepRecord
from harness.store import unsaved

runner = CliRunner()
db, folder = sys.argv[1], Path(sys.argv[2])
from harness.cli.run import Profiler

print("CHOICES", ",".join(p.value for p in Profiler))
done = runner.invoke(app, ["run", "tiny", "--device", "cpu", "--profiler", "perf", "--nsys-force",
                           "--profile-dir", str(folder / "p"), "--db", db])
print("RUN", done.exit_code, done.output.replace(chr(10), " | "))
steps = [StepRecord(step=0, warmup=False, phases={"forward": 1000, "backward": 2000, "optimizer": 3})]
result = RunResult(run_id="tiny-unsaved", config=RunConfig(model="tiny", device="cpu", warmup=0, steps=1),
                   status="ok", steps=steps)
pending = unsaved.PendingRun(result=result, created_at=datetime.now(UTC), profiler="perf")
file = unsaved.write(pending, [folder], "test")
done = runner.invoke(app, ["import", str(file), "--db", db])
print("IMPORT", done.exit_code, done.output.replace(chr(10), " | "))
"""


def test_a_new_profiler_is_one_module_and_one_registry_line(tmp_path: Path) -> None:
    """A profiler module with its own options, and one line in the registry: `run --profiler` offers it, it
    gets the options it declares (read from the command line by itself), and the import of an unsaved run
    takes its name; no other file is edited (the registry's line is made in the process that runs it)."""
    import json
    import os
    import subprocess
    import sys

    from harness.store.results import ResultsStore

    (tmp_path / "perf.py").write_text(NEWCOMER)
    (tmp_path / "driver.py").write_text(DRIVER)
    db = str(tmp_path / "r.sqlite")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(__file__).parents[1])])}
    done = subprocess.run([sys.executable, str(tmp_path / "driver.py"), db, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    said = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in done.stdout.splitlines() if " " in line}
    assert said.get("CHOICES") == "nsys,torch,perf", done.stdout + done.stderr
    assert said["RUN"].startswith("0 "), said["RUN"]
    assert said["IMPORT"].startswith("0 "), said["IMPORT"]
    stored = ResultsStore(db, readonly=True)
    assert stored.get("tiny-perf").profiler == "perf"
    assert stored.get("tiny-unsaved").profiler == "perf"
    data = tmp_path / "p" / "perf.data"
    assert stored.get("tiny-perf").artifacts == {"perf_data": str(data)}
    assert json.loads(data.read_text()) == {"options": "PerfOptions", "force": True}
