"""What each nsys records of which CUDA (harness.execution.nsys.cuda_support), decided before a capture:
known to record nothing is refused in one line with what to install, partial is a warning. The values are
those of the H100 measured in docs/gpu.md (PyTorch cu130: CUDA 13.0, driver 580: CUDA 13.0) and of the
releases NVIDIA shipped with each CUDA toolkit."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.core.errors import NsysError
from harness.execution.nsys import cuda_support as cs
from harness.execution.nsys import find as nsys_find
from harness.execution.nsys.find import NsysInfo

runner = CliRunner()


@pytest.mark.parametrize(
    ("nsys", "cuda", "verdict"),
    [
        ("2022.4.2.1", "13.0", "none"),  # the H100: 3 CUDA API calls, 0 kernels
        ("2023.4.4.54", "13.0", "partial"),  # the H100: the CUDA trace stops for 0.8 s after cuBLAS loads
        ("2022.4.2.1", "11.8", "ok"), ("2022.4.2.1", "12.1", "partial"),
        ("2023.4.4.54", "12.4", "ok"), ("2023.4.4.54", "12.1", "ok"), ("2023.4.4.54", "12.8", "partial"),
        ("2024.1.1", "12.4", "ok"),  # between two rows: made for the CUDA of the row before
        ("2025.3.2", "13.0", "ok"), ("2025.3.2", "13.1", "partial"), ("2025.6.1", "13.1", "ok"),
        ("2026.2.1", "13.4", "ok"), ("2026.2.1", "14.0", "partial"),  # past the table: its CUDA major
        ("2020.3.4", "13.0", "none"), ("2020.3.4", "11.0", "ok"),  # before the table: 11.8 at most
    ],
)  # fmt: skip
def test_what_an_nsys_records_of_a_cuda(nsys: str, cuda: str, verdict: str) -> None:
    assert cs.support(nsys, cuda).verdict == verdict


def test_the_lines_say_what_to_install() -> None:
    none = cs.support("2022.4.2.1", "13.0").line
    assert none.startswith(
        "nsys 2022.4.2.1 was made for CUDA 11.8 and records nothing of a CUDA 13.0 program"
    )
    assert "install Nsight Systems 2025.3 or newer: https://developer.nvidia.com/nsight-systems" in none
    partial = cs.support("2023.4.4.54", "13.0").line
    assert partial.startswith("nsys 2023.4.4.54 was made for CUDA 12.4; the program's CUDA 13.0 is newer")
    assert "Nsight Systems 2025.3 or newer is made for it" in partial
    assert (
        cs.support("2025.3.2", "13.0").line
        == "nsys 2025.3.2 was made for CUDA 13.0: traces the program's CUDA 13.0"
    )


@pytest.mark.parametrize(
    ("nsys", "cupti", "cuda", "verdict"),
    [
        ("2023.4.4.54", "13.0", "13.0", "ok"),  # the H100: 40,796 of 40,796 kernels, all named
        ("2023.4.4.54", "12.4", "13.0", "partial"),  # its own newest: as without
        ("2023.4.4.54", "13.0", "13.1", "partial"),  # a newer minor version than the CUPTI
        ("2022.4.2.1", "13.0", "13.0", "none"),  # not measured with a newer CUPTI: not credited
        ("2025.3.2", "13.0", "12.8", "ok"),
        ("2023.4.4.54", "13.0", "12.8", "partial"),  # nsys takes its 12.4 for a CUDA 12.8 driver
        ("2023.4.4.54", "13.0", "14.0", "partial"),  # one major version past the CUPTI, not two past 12.4
    ],
)  # fmt: skip
def test_a_newer_cupti_in_the_target_folder_extends_what_it_traces(
    nsys: str, cupti: str, cuda: str, verdict: str
) -> None:
    assert cs.support(nsys, cuda, cupti=cupti).verdict == verdict


def test_the_lines_say_which_cupti_and_how_to_add_it() -> None:
    assert cs.support("2023.4.4.54", "13.0", cupti="13.0").line == (
        "nsys 2023.4.4.54 with CUPTI 13.0 in its target folder traces the program's CUDA 13.0"
    )
    without = cs.support("2023.4.4.54", "13.0", cupti="12.4").line
    assert without.endswith(
        "; `make setup` adds CUPTI 13.0 to the project's nsys 2023.4 (scripts/install-nsys.sh)"
    )
    assert "make setup" not in cs.support("2023.4.4.54", "12.8").line  # CUPTI 13 does not help CUDA 12
    newer = cs.support("2023.4.4.54", "13.1", "the driver's", cupti="13.0").line
    assert newer.startswith(
        "nsys 2023.4.4.54 with CUPTI 13.0 in its target folder traces CUDA 13.0; "
        "the driver's CUDA 13.1 is newer"
    )
    assert cs.check_capture("2023.4.4.54", "13.0", "13.0", cupti="13.0") == []


def test_the_cuptis_beside_an_nsys_as_debian_lays_them_out(tmp_path: Path) -> None:
    target = tmp_path / "usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64"
    target.mkdir(parents=True)
    for name in (
        "libcupti.so.11.8",
        "libcupti.so.13.0",
        "libcupti.so.12.4",
        "libcupti.so",
        "libcupti-x.so.9.9",
    ):
        (target / name).write_text("")
    real = target / "nsys"
    real.write_text("#!/bin/sh\necho 'NVIDIA Nsight Systems version 2023.4.4.54-0'\n")
    real.chmod(0o755)
    bin_dir = tmp_path / "usr/lib/nsight-systems/bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "nsys").symlink_to("../../x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys")
    info = nsys_find.probe(bin_dir / "nsys")
    assert info.cuptis == ("11.8", "12.4", "13.0")
    assert info.newest_cupti == "13.0"


def test_only_the_programs_cuda_refuses() -> None:
    # a driver newer than the program is what CUDA's compatibility promises: a warning at most
    assert [s.verdict for s in cs.assess("2022.4.2.1", "11.8", "13.0")] == ["ok", "partial"]
    assert [s.verdict for s in cs.assess("2022.4.2.1", "13.0", "13.0")] == ["none", "partial"]
    assert cs.check_capture("2022.4.2.1", None, "13.0")[0].startswith(
        "nsys 2022.4.2.1 was made for CUDA 11.8;"
    )
    assert cs.check_capture("2025.3.2", "13.0", "13.0") == []


def test_a_capture_known_to_record_nothing_is_refused_unless_forced() -> None:
    with pytest.raises(
        NsysError, match=r"records nothing of a CUDA 13\.0 program.*; --nsys-force captures anyway"
    ):
        cs.check_capture("2022.4.2.1", "13.0", None)
    forced = cs.check_capture("2022.4.2.1", "13.0", None, force=True)
    assert forced == [f"--nsys-force: capturing anyway: {cs.support('2022.4.2.1', '13.0').line}"]


def fake_nsys(tmp_path: Path, version: str) -> Path:
    nsys = tmp_path / "nsys"
    nsys.write_text(f"#!/bin/sh\necho 'NVIDIA Nsight Systems version {version}-0'\n")
    nsys.chmod(0o755)
    return nsys


@pytest.fixture
def h100(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """This machine as that H100 to the checks: a run on CUDA, PyTorch cu130, driver CUDA 13.0
    (no GPU is touched: the capture must never start)."""
    import torch

    from harness.execution import checks
    from harness.profilers import nsys as nsys_profiler

    monkeypatch.setattr(checks, "resolve_device", lambda _: torch.device("cuda"))  # run, overhead
    monkeypatch.setattr(nsys_profiler, "cuda_versions", lambda device: ("13.0", "13.0"))
    return monkeypatch


@pytest.mark.parametrize("command", [["run", "tiny", "--nsys"], ["overhead", "tiny", "--repeats", "1"]])
def test_run_and_overhead_refuse_before_the_capture(h100: pytest.MonkeyPatch, tmp_path: Path, tmp_db: str,
                                                    command: list[str]) -> None:  # fmt: skip
    nsys = fake_nsys(tmp_path, "2022.4.2.1")
    result = runner.invoke(app, [*command, "--steps", "1", "--warmup", "0", "--nsys-path", str(nsys),
                                 "--profile-dir", str(tmp_path / "prof")])  # fmt: skip
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: nsys 2022.4.2.1 was made for CUDA 11.8 and records"
    )
    assert "Traceback" not in result.output
    from harness.store.results import ResultsStore

    assert not (tmp_path / "prof").exists() and ResultsStore(tmp_db).count_runs() == 0  # nothing ran


def test_the_cpu_is_never_checked(tmp_path: Path) -> None:
    from harness.profilers.nsys import cuda_check

    old = NsysInfo(
        path=fake_nsys(tmp_path, "2022.4.2.1"), version="2022.4.2.1", flags=frozenset(), source="t"
    )
    assert cuda_check(old, "cpu") == []
