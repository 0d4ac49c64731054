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
