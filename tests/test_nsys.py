"""harness.execution.nsys: finding nsys, building `nsys profile` commands by capability, profiling, qdstrm
import."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import missing

from harness.core.errors import NsysError
from harness.execution import nsys
from harness.execution.nsys import find as nsys_find

NEW = nsys.NsysInfo(
    path=Path("/opt/nsys/bin/nsys"),
    version="2025.3.1",
    flags=frozenset(
        {
            "trace",
            "cuda-graph-trace",
            "python-backtrace",
            "sample",
            "cpuctxsw",
            "capture-range",
            "capture-range-end",
            "nvtx-capture",
        }
        | {"output", "force-overwrite", "export"}
    ),
    source="PATH",
)
OLD = nsys.NsysInfo(
    path=NEW.path, version="2022.4.2.1", flags=NEW.flags - {"python-backtrace"}, source="PATH"
)
TARGET = ["python", "-m", "harness.execution.worker", "c.json", "r.json"]


def test_command_has_the_design_cards_flags_where_supported() -> None:
    argv, dropped = nsys.build_profile_command(NEW, nsys.ProfileOptions(output=Path("/p/run")), TARGET)
    assert argv == [
        "/opt/nsys/bin/nsys", "profile", "--trace=cuda,osrt,nvtx", "--cuda-graph-trace=node",
        "--python-backtrace=cuda", "--sample=none", "--cpuctxsw=none", "--output=/p/run",
        "--force-overwrite=true", "--export=sqlite", *TARGET,
    ]  # fmt: skip
    assert dropped == []


def test_a_report_the_user_names_is_not_forced_over_an_existing_file() -> None:
    given = nsys.ProfileOptions(output=Path("/p/run"), extra_args=["--output=/home/me/mine"])
    argv, _ = nsys.build_profile_command(NEW, given, TARGET)
    assert not any(a.startswith("--force-overwrite") for a in argv) and "--output=/home/me/mine" in argv
    forced = nsys.ProfileOptions(output=Path("/p/run"), extra_args=["-o", "mine", "--force-overwrite=true"])
    assert "--force-overwrite=true" in nsys.build_profile_command(NEW, forced, TARGET)[0]


def test_cuda_graphs_are_traced_per_node_only_where_cuda_is_traced() -> None:
    """Traced whole (nsys's default), a graph replay left no kernel in nsys 2023.4's export of a CUDA 13
    program on an H100; per node, its 2 kernels were there (tests/test_h100_captures.py)."""
    cpu_only = nsys.ProfileOptions(output=Path("/p/run"), trace=("osrt", "nvtx"))
    argv, _ = nsys.build_profile_command(NEW, cpu_only, TARGET)
    assert not any(a.startswith("--cuda-graph-trace") for a in argv)
    given = nsys.ProfileOptions(output=Path("/p/run"), extra_args=["--cuda-graph-trace=graph"])
    argv, _ = nsys.build_profile_command(NEW, given, TARGET)
    assert [a for a in argv if a.startswith("--cuda-graph-trace")] == ["--cuda-graph-trace=graph"]


def test_a_percent_in_the_report_path_is_literal_for_nsys() -> None:
    """nsys expands %p, %h, %q{VAR} in --output: a --profile-dir named `runs%p` made it write to a folder
    that did not exist (it fell back to /tmp/nsys-report-*); its own export expands the path again, so
    the harness exports such a report itself. The rank pattern the harness appends stays a pattern."""
    argv, _ = nsys.build_profile_command(NEW, nsys.ProfileOptions(output=Path("/p/runs%p/run")), TARGET)
    assert "--output=/p/runs%%p/run" in argv and "--export=sqlite" not in argv
    per_rank, _, _ = nsys.rank_profile_command(NEW, nsys.ProfileOptions(output=Path("/p/a%h/run")), TARGET)
    assert "--output=/p/a%%h/run.rank%q{RANK}" in per_rank and "--export=sqlite" not in per_rank
    plain, _, _ = nsys.rank_profile_command(NEW, nsys.ProfileOptions(output=Path("/p/run")), TARGET)
    assert "--output=/p/run.rank%q{RANK}" in plain and "--export=sqlite" in plain


@pytest.mark.slow
def test_a_profile_folder_with_a_percent_holds_the_report_and_its_export(
    tmp_path: Path, nsys_bin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from harness.cli import app

    folder = tmp_path / "runs%p%h%q{HOME}"
    args = ["profile", "--profile-dir", str(folder), "--db", str(tmp_path / "r.sqlite"), "--format", "json"]
    result = CliRunner().invoke(app, [*args, "--", "true"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    files = {row["kind"]: Path(row["path"]) for row in json.loads(result.stdout)["files"]}
    assert files["report"].parent == folder and files["report"].is_file()
    assert files["export"] == files["report"].with_suffix(".sqlite") and files["export"].is_file()
    assert "could not write beside" not in result.output


def test_unsupported_flag_is_dropped_and_named() -> None:
    argv, dropped = nsys.build_profile_command(OLD, nsys.ProfileOptions(output=Path("/p/run")), TARGET)
    assert not any(a.startswith("--python-backtrace") for a in argv)
    assert dropped == ["--python-backtrace=cuda (nsys 2022.4.2.1 does not support it)"]


def test_a_default_flag_this_nsys_lacks_is_left_out_unsaid(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:  # fmt: skip
    """`warning: dropped --python-backtrace=cuda` was printed on a CPU run under 2022.4, where nothing asked
    for the flag: the run leaves it out and says nothing."""
    from harness.core.records import RunConfig
    from harness.profilers.nsys import NsysOptions, launch

    seen: list[list[str]] = []

    def profile(info, opts, target, env=None, cleanup=(), progress=None):  # type: ignore[no-untyped-def]
        seen.append(nsys.build_profile_command(info, opts, target)[0])
        return nsys.ProfileResult(
            returncode=1, rep=None, sqlite=None, qdstrm=None, stderr_tail="", notes=["n"]
        )

    monkeypatch.setattr(nsys, "profile", profile)
    config = RunConfig(model="tiny", device="cpu", warmup=0, steps=1)
    _, _, notes = launch(config, NsysOptions(profile_dir=tmp_path), OLD, "tiny-1")
    assert notes == ["n"]
    assert not any(a.startswith("--python-backtrace") for a in seen[0])
    _, _, notes = launch(config, NsysOptions(profile_dir=tmp_path), NEW, "tiny-2")
    assert "--python-backtrace=cuda" in seen[1] and notes == ["n"]


def test_a_worker_that_died_under_nsys_is_told_by_its_own_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's error quotes what the workload printed, not nsys's import error after it."""
    from harness.core.records import RunConfig
    from harness.profilers.nsys import NsysOptions, launch

    def profile(info, opts, target, env=None, cleanup=(), progress=None):  # type: ignore[no-untyped-def]
        return nsys.ProfileResult(returncode=1, rep=None, sqlite=None, qdstrm=None,
                                  stderr_tail="      Items {", program_tail="ValueError: boom")  # fmt: skip

    monkeypatch.setattr(nsys, "profile", profile)
    config = RunConfig(model="tiny", device="cpu", warmup=0, steps=1)
    result, _, _ = launch(config, NsysOptions(profile_dir=tmp_path), NEW, "tiny-1")
    assert result.status == "error" and "ValueError: boom" in (result.error or "")
    assert "Items" not in (result.error or "")


def test_full_mode_keeps_sampling_and_measured_capture_uses_nvtx_range() -> None:
    opts = nsys.ProfileOptions(output=Path("/p/run"), mode="full", capture="measured")
    argv, _ = nsys.build_profile_command(NEW, opts, TARGET)
    assert "--sample=none" not in argv and "--cpuctxsw=none" not in argv
    i = argv.index("--capture-range=nvtx")
    assert argv[i + 1 : i + 3] == ["--nvtx-capture=measured", "--capture-range-end=stop"]
    assert nsys._env_for(opts, {})["NSYS_NVTX_PROFILER_REGISTER_ONLY"] == "0"
    assert "NSYS_NVTX_PROFILER_REGISTER_ONLY" not in nsys._env_for(nsys.ProfileOptions(output=Path("x")), {})


def test_extra_args_replace_defaults_of_the_same_name() -> None:
    opts = nsys.ProfileOptions(output=Path("/p/run"), extra_args=["--sample=process-tree", "-t", "nvtx,osrt"])
    argv, _ = nsys.build_profile_command(NEW, opts, TARGET)
    assert "--sample=none" not in argv and "--trace=cuda,osrt,nvtx" not in argv
    assert argv[-len(TARGET) - 3 : -len(TARGET)] == ["--sample=process-tree", "-t", "nvtx,osrt"]
    assert "--cpuctxsw=none" in argv


def test_tail_drops_progress_bars() -> None:
    text = "[1/2] [0%    ] a.nsys-rep\r[1/2] [100%] a.nsys-rep\nGenerated:\n    /p/a.nsys-rep\n"
    assert nsys._tail(text) == "Generated:\n    /p/a.nsys-rep"


def test_a_long_line_of_the_tail_shows_its_end() -> None:
    """A program's last line a megabyte long is shown by its end, not printed whole to the terminal (the
    whole line is in the run's log)."""
    text = "start\n" + "a" * 1_000_000 + "END\nlast\n"
    assert nsys._tail(text) == "start\n…" + "a" * 997 + "END\nlast"


def test_program_lines_outlast_a_long_nsys_error(tmp_path: Path) -> None:
    """nsys's importer can fail after the run with a dump longer than the kept tail (seen in CI under
    nsys 2023.4): the lines the program printed are still the ones shown, never the dump's end."""
    fake = tmp_path / "nsys"
    fake.write_text(
        "#!/bin/sh\n"
        "echo first; echo 'boom: [red]x[/red]' >&2\n"
        f"echo \"Generating '{tmp_path}/gone.qdstrm'\"\n"
        "i=0; while [ $i -lt 60 ]; do echo '      Items {'; i=$((i+1)); done\n"
        "exit 5\n"
    )
    fake.chmod(0o755)
    info = nsys.NsysInfo(path=fake, version="2023.4.4.54", flags=NEW.flags, source="PATH")
    prof = nsys.profile(info, nsys.ProfileOptions(output=tmp_path / "run", export_sqlite=False), ["true"])
    assert prof.returncode == 5 and prof.rep is None
    assert prof.program_tail == "first\nboom: [red]x[/red]"
    assert prof.stderr_tail.splitlines()[-1] == "      Items {"


def _agent_losing_nsys(folder: Path, losses: int) -> Path:
    """A stand-in nsys that loses its agent on its first `losses` calls (counted in folder/calls), then
    runs the program's part: prints `first` and exits 0."""
    fake = folder / "nsys"
    fake.write_text(
        "#!/bin/sh\n"
        f"echo x >> '{folder}/calls'\n"
        f"if [ $(wc -l < '{folder}/calls') -le {losses} ]; then\n"
        "  echo \"Connection to Agent lost. This is most likely a bug. Internal reason: 'End of file'.\"\n"
        "  exit 1\n"
        "fi\n"
        "echo first\n"
    )
    fake.chmod(0o755)
    return fake


@pytest.mark.parametrize(("losses", "calls", "returncode"), [(1, 2, 0), (2, 2, 1)])
def test_a_capture_whose_nsys_lost_its_agent_is_made_once_more(
    tmp_path: Path, losses: int, calls: int, returncode: int
) -> None:
    """nsys 2023.4 once lost its agent in a CI run ("Connection to Agent lost", no report): the capture is
    made again, once, and the notes say so."""
    fake = _agent_losing_nsys(tmp_path, losses)
    info = nsys.NsysInfo(path=fake, version="2023.4.4.54", flags=NEW.flags, source="PATH")
    prof = nsys.profile(info, nsys.ProfileOptions(output=tmp_path / "run", export_sqlite=False), ["true"])
    assert (tmp_path / "calls").read_text().count("x") == calls
    assert prof.returncode == returncode
    assert prof.notes[0] == (
        "nsys lost its agent before it wrote a report (Connection to Agent lost): captured once more"
    )
    assert prof.program_tail == (
        "first"
        if returncode == 0
        else "Connection to Agent lost. This is most likely a bug. Internal reason: 'End of file'."
    )


def test_a_failed_program_is_not_captured_again(tmp_path: Path) -> None:
    fake = tmp_path / "nsys"
    fake.write_text(f"#!/bin/sh\necho x >> '{tmp_path}/calls'\necho 'boom'\nexit 3\n")
    fake.chmod(0o755)
    info = nsys.NsysInfo(path=fake, version="2023.4.4.54", flags=NEW.flags, source="PATH")
    prof = nsys.profile(info, nsys.ProfileOptions(output=tmp_path / "run", export_sqlite=False), ["true"])
    assert (tmp_path / "calls").read_text().count("x") == 1 and prof.returncode == 3 and prof.notes == []


def _fake_nsys(folder: Path) -> Path:
    """A stand-in binary answering --version and `profile --help` like nsys 2022.4 does."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nsys"
    path.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then\n'
        '  echo "NVIDIA Nsight Systems version 2022.4.2.1-df9881f"; exit 0\n'
        "fi\n"
        'printf "usage: nsys profile\\n\\t-t, --trace=\\n\\t--capture-range-end=\\n"\n'
        'printf "\\t   with --foo text\\n"\n'
    )
    path.chmod(0o755)
    return path


def test_find_order_explicit_then_env_then_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nsys.probe.cache_clear()
    a, b, c = (_fake_nsys(tmp_path / d) for d in "abc")
    monkeypatch.setenv("PATH", str(c.parent))
    monkeypatch.setenv("HARNESS_NSYS", str(b))
    assert nsys.find_nsys(str(a)).path == a and nsys.find_nsys(str(a)).source == "--nsys-path"
    assert nsys.find_nsys().path == b
    monkeypatch.delenv("HARNESS_NSYS")
    found = nsys.find_nsys()
    assert (found.path, found.source, found.version) == (c, "PATH", "2022.4.2.1")
    assert found.flags == {"trace", "capture-range-end"}


def test_named_but_missing_nsys_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(NsysError, match=r"nsys given by --nsys-path is not an executable file: .*nope"):
        nsys.find_nsys(str(tmp_path / "nope"))
    monkeypatch.setenv("HARNESS_NSYS", str(tmp_path / "gone"))
    with pytest.raises(NsysError, match="HARNESS_NSYS"):
        nsys.find_nsys()


def test_a_program_that_is_not_nsys_is_named_so(tmp_path: Path) -> None:
    """`--nsys-path /bin/true` said "--version failed: Written by Jim Meyering." though it exited 0."""
    fake = tmp_path / "nsys"
    fake.write_text("#!/bin/sh\necho 'true (GNU coreutils) 9.1'\necho 'Written by Jim Meyering.'\n")
    fake.chmod(0o755)
    with pytest.raises(NsysError, match=r"nsys is not nsys: its --version printed no Nsight Systems version "
                                        r"\('true \(GNU coreutils\) 9\.1'\)"):  # fmt: skip
        nsys.find_nsys(str(fake))
    fake.write_text("#!/bin/sh\necho 'broken install' >&2\nexit 3\n")
    with pytest.raises(NsysError, match=r"nsys --version failed \(exit 3\): broken install"):
        nsys.find_nsys(str(fake))


def test_a_program_whose_version_fails_is_named_not_a_working_nsys(tmp_path: Path) -> None:
    """`--nsys-path /bin/false` said "/bin/false --version failed (exit 1): Written by Jim Meyering.": the
    last line of its output, not what the program is, nor that it is no nsys."""
    fake = tmp_path / "false"
    fake.write_text("#!/bin/sh\necho 'false (GNU coreutils) 9.1'\necho 'Written by Jim Meyering.'\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(NsysError) as said:
        nsys.find_nsys(str(fake))
    assert str(said.value).startswith(
        f"{fake} is not a working nsys: {fake} --version failed (exit 1): false (GNU coreutils) 9.1; install "
    )
    fake.write_text("#!/bin/sh\nexit 1\n")
    with pytest.raises(NsysError, match=r"false --version failed \(exit 1\): it printed nothing; install"):
        nsys.find_nsys(str(fake))


def test_nothing_found_says_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HARNESS_NSYS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(nsys_find, "INSTALL_PLACES", ())
    monkeypatch.setattr(nsys_find, "PROJECT_LOCAL", tmp_path / "none" / "nsys")
    with pytest.raises(NsysError, match=r"^nsys not found; install Nsight Systems: `make setup`"):
        nsys.find_nsys()


def test_nsys_named_in_the_environment_is_named_as_such(tmp_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from typer.testing import CliRunner

    from harness.cli import app

    monkeypatch.setenv("HARNESS_NSYS", "/etc/passwd")
    said = "nsys given by HARNESS_NSYS is not an executable file: /etc/passwd"
    run = CliRunner().invoke(app, ["run", "char", "--device", "cpu", "--nsys", "--steps", "1"])
    assert run.exit_code == 1
    assert run.output.strip().splitlines() == [f"error: {said}; {nsys.HOW_TO_GET}"]
    doctor = CliRunner().invoke(app, ["doctor", "--no-self-test", "--format", "json"])
    assert doctor.stdout.strip(), doctor.output  # what it said instead of its table, where it printed none
    checks = {row["Check"]: row for row in json.loads(doctor.stdout)}
    assert checks["nsys"]["Detail"].startswith(said)


def test_an_nsys_that_hangs_on_profile_help_is_an_nsys_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One that answers --version and then hangs on `profile --help` (a wrapper script waiting on
    something) ended `harness doctor` in a TimeoutExpired traceback."""
    script = tmp_path / "nsys"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then echo "NVIDIA Nsight Systems version 2023.4.4.54"; exit; fi\n'
        "exec sleep 30\n"
    )
    script.chmod(0o755)
    monkeypatch.setattr(nsys_find, "PROBE_TIMEOUT_S", 1)
    with pytest.raises(NsysError, match=r"is not a working nsys: `\S+ profile --help` did not finish"):
        nsys_find.probe(script, "HARNESS_NSYS")


def test_an_nsys_path_with_a_line_end_is_said_quoted(tmp_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """HARNESS_NSYS read with its line end was said as the path and a line break: two lines, the break
    unseen."""
    from typer.testing import CliRunner

    from harness.cli import app

    monkeypatch.setenv("HARNESS_NSYS", "/usr/bin/nsys\n")
    run = CliRunner().invoke(app, ["run", "char", "--device", "cpu", "--nsys", "--steps", "1"])
    assert run.exit_code == 1
    said = "error: nsys given by HARNESS_NSYS is not an executable file: '/usr/bin/nsys\\n'"
    assert run.output.strip().splitlines() == [f"{said}; {nsys.HOW_TO_GET}"]


def test_an_nsys_under_home_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HARNESS_NSYS='~/bin/nsys' (quoted: the shell leaves the ~) was refused as no executable file."""
    script = tmp_path / "bin" / "nsys"
    script.parent.mkdir()
    script.write_text('#!/bin/sh\necho "NVIDIA Nsight Systems version 2023.4.4.54"\n')
    script.chmod(0o755)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("HARNESS_NSYS", "~/bin/nsys")
    found = nsys_find.find_nsys()
    assert (found.path, found.source) == (script, "HARNESS_NSYS")
    nsys_find.installed_version.cache_clear()
    try:  # the version the tables follow is that nsys's too
        assert nsys_find.installed_version() == "2023.4.4.54"
    finally:
        nsys_find.installed_version.cache_clear()


def test_report_name_from_pass_through_arguments() -> None:
    opts = nsys.ProfileOptions(output=Path("/p/run-1"))
    assert nsys.report_base(opts) == Path("/p/run-1")
    for extra, base in (
        (["--output=out/custom"], Path.cwd() / "out" / "custom"),
        (["-o", "/abs/x.nsys-rep"], Path("/abs/x")),
        (["--output", "/a", "--output=/b.qdrep"], Path("/b")),
        (["--output=%p/rep-%h"], None),
    ):
        assert nsys.report_base(nsys.ProfileOptions(output=Path("/p/run-1"), extra_args=extra)) == base
    argv, _ = nsys.build_profile_command(
        NEW, nsys.ProfileOptions(output=Path("/p/run-1"), extra_args=["--output=out/custom"]), TARGET
    )
    assert [a for a in argv if "output" in a] == ["--output=out/custom"]


def test_generated_files_are_read_from_nsys_output() -> None:
    text = (
        "Generating '/tmp/nsys-report-1.qdstrm'\r[1/1] [====100%] r.nsys-rep\n"
        "Generated:\n    /tmp/nsys-report-4c98.nsys-rep\n    /tmp/nsys-report-db8b.sqlite\nbye\n"
    )
    listed = [Path("/tmp/nsys-report-4c98.nsys-rep"), Path("/tmp/nsys-report-db8b.sqlite")]
    assert nsys._generated(text) == listed


# --- with the real nsys ---------------------------------------------------------------------------------

RANGES_SCRIPT = """
import nvtx
for i in range(5):
    if i == 2:
        nvtx.push_range("measured")
    nvtx.push_range("step", payload=i)
    sum(range(20000))
    nvtx.pop_range()
nvtx.pop_range()
"""


def _steps_in(sqlite: Path) -> list[int]:
    con = sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT int64Value FROM NVTX_EVENTS LEFT JOIN StringIds ON StringIds.id = textId "
            "WHERE coalesce(text, value) = 'step' ORDER BY start"
        ).fetchall()
    finally:
        con.close()
    return [r[0] for r in rows]


@pytest.fixture
def real(nsys_bin: str) -> nsys.NsysInfo:
    return nsys.probe(Path(nsys_bin))


@pytest.mark.nsys
def test_real_nsys_version_and_flags(real: nsys.NsysInfo) -> None:
    assert real.version.count(".") >= 2 and real.supports("--trace") and real.supports("capture-range")
    if real.version.startswith("2022.4"):
        assert not real.supports("python-backtrace")


@pytest.mark.nsys
@pytest.mark.slow
def test_measured_capture_leaves_warmup_out(real: nsys.NsysInfo, tmp_path: Path) -> None:
    script = tmp_path / "ranges.py"
    script.write_text(RANGES_SCRIPT)
    both = {}
    for capture in ("all", "measured"):
        opts = nsys.ProfileOptions(output=tmp_path / capture, trace=("nvtx",), capture=capture)
        prof = nsys.profile(real, opts, [sys.executable, str(script)])
        assert prof.returncode == 0 and prof.rep == tmp_path / f"{capture}.nsys-rep"
        both[capture] = _steps_in(prof.sqlite)
    assert both == {"all": [0, 1, 2, 3, 4], "measured": [2, 3, 4]}


@pytest.mark.nsys
@pytest.mark.slow
def test_program_exit_code_is_passed_on(real: nsys.NsysInfo, tmp_path: Path) -> None:
    opts = nsys.ProfileOptions(output=tmp_path / "fail", trace=("osrt",))
    prof = nsys.profile(
        real, opts, [sys.executable, "-c", "import sys; print('bad input', file=sys.stderr); sys.exit(5)"]
    )
    assert prof.returncode == 5 and "bad input" in prof.stderr_tail
    assert prof.rep is not None  # what was recorded is kept


@pytest.mark.nsys
@pytest.mark.slow
def test_qdstrm_left_by_nsys_is_imported(real: nsys.NsysInfo, tmp_path: Path) -> None:
    """A target dir without host-linux-x64 beside it leaves only a .qdstrm: the harness imports it"""
    target_dir = real.path.resolve().parent
    if target_dir.name != "target-linux-x64":
        missing(f"needs the Debian layout of the project-local nsys (target-linux-x64/nsys), not {real.path}")
    broken = tmp_path / "broken" / "target-linux-x64"
    broken.parent.mkdir()
    # hard links: a whole nsys target tree without copying 177 MB
    if subprocess.run(["cp", "-al", str(target_dir), str(broken)]).returncode != 0:
        shutil.copytree(target_dir, broken, symlinks=True)
    lonely = nsys.probe(broken / "nsys")
    script = tmp_path / "ranges.py"
    script.write_text(RANGES_SCRIPT)
    prof = nsys.profile(
        lonely, nsys.ProfileOptions(output=tmp_path / "run", trace=("nvtx",)), [sys.executable, str(script)]
    )
    assert "nsys left only run.qdstrm: imported it with QdstrmImporter" in prof.notes
    assert prof.rep == tmp_path / "run.nsys-rep" and prof.rep.is_file()
    assert _steps_in(prof.sqlite) == [0, 1, 2, 3, 4]


@pytest.mark.nsys
@pytest.mark.slow
def test_export_reads_the_report_only(real: nsys.NsysInfo, tmp_path: Path) -> None:
    script = tmp_path / "ranges.py"
    script.write_text(RANGES_SCRIPT)
    opts = nsys.ProfileOptions(output=tmp_path / "r", trace=("nvtx",), export_sqlite=False)
    prof = nsys.profile(real, opts, [sys.executable, str(script)])
    assert prof.sqlite is None and prof.rep is not None
    before = prof.rep.read_bytes()
    out = nsys.export_sqlite(prof.rep, tmp_path / "elsewhere.sqlite", real)
    assert _steps_in(out) == [0, 1, 2, 3, 4]
    assert prof.rep.read_bytes() == before
    with pytest.raises(NsysError, match="nsys export could not export"):
        nsys.export_sqlite(script, tmp_path / "x.sqlite", real)
    assert os.listdir(tmp_path).count("x.sqlite") == 0


@pytest.mark.parametrize(
    "command",
    [["run", "tiny", "--device", "cpu", "--nsys"], ["optimize", "tiny", "--device", "cpu"],
     ["profile", "--", "true"]],
    ids=["run", "optimize", "profile"],
)  # fmt: skip
def test_a_refused_nsys_creates_no_database_nor_folder(tmp_path: Path, command: list[str]) -> None:
    """`run --nsys --nsys-path /bin/false --db X` (and `optimize`, `profile`) refused the nsys after they had
    created the database X and its folder: the nsys is checked before anything is made."""
    from typer.testing import CliRunner

    from harness.cli import app

    db = tmp_path / "new" / "results.db"
    profiles = tmp_path / "profiles"
    given = ["--nsys-path", "/bin/false", "--db", str(db), "--profile-dir", str(profiles)]
    at = command.index("--") if "--" in command else len(command)
    run = CliRunner().invoke(app, [*command[:at], *given, *command[at:]])
    assert run.exit_code == 1
    assert run.output.startswith("error: /bin/false is not a working nsys: ")
    assert len(run.output.strip().splitlines()) == 1
    assert not db.exists() and not db.parent.exists()
    assert not profiles.exists()
