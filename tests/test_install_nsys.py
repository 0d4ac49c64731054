"""scripts/install-nsys.sh: which archive it reads from the apt sources, the private apt state it downloads
with, which nsys it installs (2023.4 from trixie, 2022.4 only as the fallback), that it replaces an older
project-local copy and says what it installed, and that /etc/apt is only read.

The functions run against a temporary tree of sources files (HARNESS_APT_DIR); apt-get is a stub that serves
small .deb packages built here (dpkg-deb), so no network and no real apt run.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, missing
from procs import default_sigint, wait_until

SCRIPT = REPO / "scripts" / "install-nsys.sh"
DEBIAN_MAIN = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""
NODESOURCE = """\
Types: deb
URIs: https://deb.nodesource.com/node_20.x
Suites: nodistro
Components: main
Signed-By: /usr/share/keyrings/nodesource.gpg
"""


def bash(apt_dir: Path, code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    if shutil.which("bash") is None:
        missing("bash not found")
    return subprocess.run(
        ["bash", "-c", f'source "{SCRIPT}"; {code}'],
        capture_output=True, text=True,
        env={"HARNESS_APT_DIR": str(apt_dir), "PATH": "/usr/bin:/bin", **(env or {})},
    )  # fmt: skip


def apt_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    for name, text in files.items():
        (apt / name).write_text(text)
    return apt


def snapshot(apt: Path) -> dict[str, str]:
    return {str(p.relative_to(apt)): p.read_text() for p in sorted(apt.rglob("*")) if p.is_file()}


DEB = "http://deb.debian.org/debian"
MIRROR = "http://mirror.example/debian"
DEBIAN = "sources.list.d/debian.sources"


def stanza(uri: str = MIRROR, suites: str = "bookworm bookworm-updates", types: str = "deb",
           extra: str = "") -> str:  # fmt: skip
    """A deb822 sources file: a Debian stanza with these fields, then the security stanza."""
    first = f"Types: {types}\nURIs: {uri}\nSuites: {suites}\nComponents: main\n{extra}"
    return first + "\n" + DEBIAN_MAIN.split("\n\n")[1]


# the machine's own archive for bookworm as archive_uri reads it from the sources (DEB: none, the default)
CASES = {
    "Debian's own": ({DEBIAN: DEBIAN_MAIN}, DEB),
    "a mirror": ({DEBIAN: stanza()}, MIRROR),
    "security and nodesource are not it": ({DEBIAN: DEBIAN_MAIN.split("\n\n")[1],
                                            "sources.list.d/node.sources": NODESOURCE}, DEB),
    "stanza disabled": ({DEBIAN: stanza(extra="Enabled: no\n")}, DEB),
    "deb-src only": ({DEBIAN: stanza(types="deb-src")}, DEB),
    "another suite": ({DEBIAN: stanza(suites="bookworm-updates")}, DEB),
    "one-line format": ({"sources.list": f"deb {MIRROR} bookworm main contrib\n"}, MIRROR),
    "one-line with options": (
        {"sources.list": f"deb [arch=amd64 signed-by=/k] {MIRROR} bookworm main"}, MIRROR),
    "commented out": ({"sources.list": f"# deb {MIRROR} bookworm main\n"}, DEB),
    "one-line deb-src": ({"sources.list": f"deb-src {MIRROR} bookworm main\n"}, DEB),
    "a file apt ignores": ({"sources.list.d/extra.list.disabled": f"deb {MIRROR} bookworm main\n"}, DEB),
    "no sources": ({}, DEB),
}  # fmt: skip


@pytest.mark.parametrize(("files", "expected"), list(CASES.values()), ids=list(CASES))
def test_archive_uri(tmp_path: Path, files: dict[str, str], expected: str) -> None:
    done = bash(apt_tree(tmp_path, files), f"archive_uri bookworm {DEB}")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{expected}\n"


def test_private_apt_state_is_all_in_its_folder(tmp_path: Path) -> None:
    stub = fake_bin(tmp_path, 'echo "$@" > "$ARGS_FILE"')
    root = tmp_path / "state"
    env = {"PATH": f"{stub}:/usr/bin:/bin", "ARGS_FILE": str(tmp_path / "args")}
    done = bash(tmp_path, f'private_source "{root}" {MIRROR} trixie non-free /k.gpg; '
                f'private_apt "{root}" update', env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (root / "sources.list.d" / "nsys.sources").read_text() == (
        f"Types: deb\nURIs: {MIRROR}\nSuites: trixie\nComponents: non-free\nSigned-By: /k.gpg\n"
    )
    args = (tmp_path / "args").read_text().split()
    assert args[-1] == "update"
    options = dict(a.split("=", 1) for a in args[1:-1:2])
    assert options == {
        "Dir::Etc::SourceList": "/dev/null",
        "Dir::Etc::SourceParts": f"{root}/sources.list.d",
        "Dir::State::Lists": f"{root}/lists",
        "Dir::Cache": f"{root}/cache",
        "Dir::Etc::Preferences": "/dev/null",
        "Dir::Etc::PreferencesParts": f"{root}/prefs",
    }


# --- the whole script, with a stub apt-get serving small packages ------------------------------------------

# apt-get as the script calls it: `update` fails for a suite the stub does not serve (as apt does for a
# Release file it cannot get); `download` copies that suite's packages into the current folder
APT_STUB = r"""
parts="" cmd=""
while (($#)); do
  case "$1" in
    -o) [[ "$2" == Dir::Etc::SourceParts=* ]] && parts="${2#*=}"; shift 2 ;;
    -*) shift ;;
    *) [[ -z "$cmd" ]] && cmd="$1"; shift ;;
  esac
done
echo "$cmd" >> "$STUB_LOG"
[[ "$cmd" == install ]] && exit 0
suite="$(awk '/^Suites:/ {print $2}' "$parts"/*.sources)"
if [[ ! -d "$STUB_DEBS/$suite" ]]; then
  echo "E: The repository 'x $suite Release' does not have a Release file." >&2; exit 100
fi
[[ "$cmd" == download ]] && cp "$STUB_DEBS/$suite"/*.deb .
exit 0
"""


def fake_bin(tmp_path: Path, apt_get: str) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    for name, body in {"apt-get": apt_get, "sudo": '"$@"'}.items():
        tool = folder / name
        tool.write_text(f"#!/usr/bin/env bash\n{body}\n")
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return folder


TARGET = "usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64"


def build_debs(folder: Path, version: str) -> None:
    """nsight-systems and nsight-systems-target as Debian lays them out: an nsys that prints `version`,
    host-linux-x64/, and the stats modules in python3's dist-packages."""
    if shutil.which("dpkg-deb") is None:
        missing("dpkg-deb not found")
    folder.mkdir(parents=True)
    for package in ("nsight-systems", "nsight-systems-target"):
        tree = folder / package
        (tree / "DEBIAN").mkdir(parents=True)
        (tree / "DEBIAN" / "control").write_text(
            f"Package: {package}\nVersion: {version}\nArchitecture: amd64\nMaintainer: t <t@t>\n"
            "Description: test\n"
        )
        if package == "nsight-systems":
            nsys = tree / "usr/lib/nsight-systems/bin/nsys"
            nsys.parent.mkdir(parents=True)
            nsys.write_text(f"#!/bin/sh\necho 'NVIDIA Nsight Systems version {version}-0'\n")
            nsys.chmod(0o755)
            (tree / "usr/lib/nsight-systems/host-linux-x64").mkdir(parents=True)
            stats = tree / "usr/lib/python3/dist-packages"
            stats.mkdir(parents=True)
            for module in ("nsysstats.py", "gpustats.py"):
                (stats / module).write_text(f"# {module}\n")
        else:
            (tree / TARGET).mkdir(parents=True)
            (tree / TARGET / "libcupti.so.12.4").write_text("")
        deb = folder / f"{package}_{version}_amd64.deb"
        subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(tree), str(deb)],
                       check=True, capture_output=True)  # fmt: skip
        shutil.rmtree(tree)


CUPTI_BYTES = b"\x7fELF libcupti 13.0"


def cupti_wheel(path: Path, member: str = "nvidia/cu13/lib/libcupti.so.13") -> Path:
    """A wheel laid out as PyPI's nvidia-cuda-cupti 13.0 (only the library the install takes)."""
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(member, CUPTI_BYTES)
        whl.writestr("nvidia_cuda_cupti-13.0.85.dist-info/METADATA", "Name: nvidia-cuda-cupti\n")
    return path


def cupti_of(env: dict[str, str]) -> Path:
    return Path(env["HARNESS_NSYS_ROOT"]) / f"{TARGET}/libcupti.so.13.0"


@pytest.fixture
def machine(tmp_path: Path) -> dict[str, str]:
    """A Debian 12 machine whose apt sources name a mirror; the stub serves trixie (2023.4.4) and bookworm
    (2022.4.2.1)."""
    debs = tmp_path / "debs"
    build_debs(debs / "trixie", "2023.4.4.54")
    build_debs(debs / "bookworm", "2022.4.2.1")
    release = tmp_path / "os-release"
    release.write_text('ID=debian\nVERSION_CODENAME=bookworm\nPRETTY_NAME="Debian GNU/Linux 12"\n')
    keyring = tmp_path / "debian-archive-keyring.gpg"
    keyring.write_text("")
    apt = apt_tree(tmp_path, {DEBIAN: stanza()})
    return {
        "HARNESS_CUPTI_WHEEL": str(cupti_wheel(tmp_path / "nvidia_cuda_cupti-13.0.85-py3-none-any.whl")),
        "HARNESS_PIP_PYTHON": sys.executable,
        "HARNESS_APT_DIR": str(apt),
        "HARNESS_OS_RELEASE": str(release),
        "HARNESS_DEBIAN_KEYRING": str(keyring),
        "HARNESS_NSYS_ROOT": str(tmp_path / "tools" / "nsys"),
        "PATH": f"{fake_bin(tmp_path, APT_STUB)}:/usr/bin:/bin",
        "STUB_DEBS": str(debs),
        "STUB_LOG": str(tmp_path / "apt.log"),
        "HOME": str(tmp_path),
    }


def install(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env)


def nsys_of(env: dict[str, str]) -> Path:
    return Path(env["HARNESS_NSYS_ROOT"]) / "usr/lib/nsight-systems/bin/nsys"


def test_installs_2023_4_from_trixie_and_says_so(machine: dict[str, str]) -> None:
    apt = snapshot(Path(machine["HARNESS_APT_DIR"]))
    done = install(machine)
    assert done.returncode == 0, done.stderr
    assert f"installed Nsight Systems 2023.4.4.54 from Debian trixie non-free ({MIRROR})" in done.stdout
    assert subprocess.run([nsys_of(machine), "--version"], capture_output=True, text=True).stdout.startswith(
        "NVIDIA Nsight Systems version 2023.4.4.54"
    )
    root = Path(machine["HARNESS_NSYS_ROOT"])
    host = root / "usr/lib/nsight-systems/host-linux-x64"
    assert os.readlink(root / "usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64") == (
        "../../nsight-systems/host-linux-x64"
    )
    assert os.readlink(host / "libssh.so") == "/usr/lib/x86_64-linux-gnu/libssh.so.4"
    assert sorted(p.name for p in (host / "python/lib").iterdir()) == ["gpustats.py", "nsysstats.py"]
    assert snapshot(Path(machine["HARNESS_APT_DIR"])) == apt  # the sources were only read
    assert not Path(f"{root}.new").exists() and not Path(f"{root}.old").exists()
    added = "added CUPTI 13.0 (nvidia-cuda-cupti==13.0.85) to its target folder: nsys 2023.4.4.54 traces CUDA"
    assert added in done.stdout
    assert cupti_of(machine).read_bytes() == CUPTI_BYTES
    assert sorted(p.name for p in (root / TARGET).glob("libcupti.so.*")) == [
        "libcupti.so.12.4",
        "libcupti.so.13.0",
    ]


def test_an_installed_2023_4_without_cupti_13_gets_it(machine: dict[str, str]) -> None:
    """A clone set up before CUPTI 13.0 was added: the next `make setup` adds it, downloading nothing else."""
    install(machine)
    cupti_of(machine).unlink()
    calls = Path(machine["STUB_LOG"]).read_text()
    done = install(machine)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"nsys: {nsys_of(machine)} (project-local 2023.4.4.54, already installed)",
        "nsys: added CUPTI 13.0 (nvidia-cuda-cupti==13.0.85) to its target folder: nsys 2023.4.4.54 traces "
        "CUDA 13.0 with it",
    ]
    assert cupti_of(machine).read_bytes() == CUPTI_BYTES
    assert Path(machine["STUB_LOG"]).read_text() == calls


def test_a_cupti_that_cannot_be_had_is_a_warning(machine: dict[str, str], tmp_path: Path) -> None:
    empty = cupti_wheel(tmp_path / "other.whl", member="nvidia/cu13/lib/libnvperf_host.so")
    done = install({**machine, "HARNESS_CUPTI_WHEEL": str(empty)})
    assert done.returncode == 0, done.stderr
    said = f"nsys: warning: no libcupti.so.13 taken from {empty}: the wheel holds no lib/libcupti.so.13"
    assert said in done.stdout
    assert "installed Nsight Systems 2023.4.4.54" in done.stdout
    assert not cupti_of(machine).exists()
    assert not list((Path(machine["HARNESS_NSYS_ROOT"]) / TARGET).glob("*.part"))


def test_falls_back_to_the_machines_own_suite(machine: dict[str, str]) -> None:
    shutil.rmtree(Path(machine["STUB_DEBS"]) / "trixie")  # trixie cannot be had
    done = install(machine)
    assert done.returncode == 0, done.stderr
    assert "Debian trixie non-free could not be had" in done.stdout
    fallback = f"installed Nsight Systems 2022.4.2.1 from bookworm non-free ({MIRROR}), the fallback"
    assert fallback in done.stdout
    assert "CUPTI" not in done.stdout and not cupti_of(machine).exists()  # 2022.4 was not measured with it


def test_replaces_an_older_project_local_copy(machine: dict[str, str]) -> None:
    trixie = Path(machine["STUB_DEBS"]) / "trixie"
    trixie.rename(trixie.with_name("held"))
    assert "2022.4.2.1" in install(machine).stdout  # a user who ran the old `make setup`
    trixie.with_name("held").rename(trixie)
    done = install(machine)
    assert done.returncode == 0, done.stderr
    assert "the project-local 2022.4.2.1 is older than 2023.4" in done.stdout
    assert "installed Nsight Systems 2023.4.4.54" in done.stdout
    calls = Path(machine["STUB_LOG"]).read_text()
    again = install(machine)  # now current: nothing downloaded
    assert again.stdout == f"nsys: {nsys_of(machine)} (project-local 2023.4.4.54, already installed)\n"
    assert Path(machine["STUB_LOG"]).read_text() == calls


def test_an_older_copy_is_kept_when_nothing_newer_can_be_had(machine: dict[str, str]) -> None:
    trixie = Path(machine["STUB_DEBS"]) / "trixie"
    shutil.rmtree(trixie)
    install(machine)
    shutil.rmtree(Path(machine["STUB_DEBS"]) / "bookworm")  # now offline
    done = install(machine)
    assert done.returncode == 0
    assert "keeping the project-local 2022.4.2.1" in done.stdout
    assert nsys_of(machine).is_file()


def test_nothing_installed_where_an_nsys_is_given(machine: dict[str, str], tmp_path: Path) -> None:
    given = tmp_path / "nsys"
    given.write_text("#!/bin/sh\n")
    given.chmod(0o755)
    done = install({**machine, "HARNESS_NSYS": str(given)})
    assert done.stdout == f"nsys: {given} (HARNESS_NSYS, nothing installed)\n"
    assert not Path(machine["STUB_LOG"]).exists()


def test_sourcing_runs_nothing(tmp_path: Path) -> None:
    apt = apt_tree(tmp_path, {})
    done = bash(apt, "type main >/dev/null && echo defined")
    assert done.returncode == 0 and done.stdout == "defined\n" and done.stderr == ""
    assert snapshot(apt) == {}


# --- what it says when it cannot install -------------------------------------------------------------------

# apt-get on a machine whose mirror cannot be reached: `update` warns and exits 0, as apt does; `download`
# then finds no package
OFFLINE_APT = r"""
cmd=""
for a in "$@"; do case "$a" in update|download|install) cmd="$a" ;; esac; done
echo "$cmd" >> "$STUB_LOG"
if [[ "$cmd" == update ]]; then
  url=http://mirror.example/debian/dists/trixie/InRelease
  echo "W: Failed to fetch $url  Temporary failure resolving 'mirror.example'"
  echo "W: Some index files failed to download. They have been ignored, or old ones used instead."
  exit 0
fi
echo "E: Unable to locate package nsight-systems"
exit 100
"""


def test_an_unreachable_mirror_is_said_so(machine: dict[str, str], tmp_path: Path) -> None:
    """It said "E: Unable to locate package nsight-systems", hiding that the mirror was never reached."""
    offline = tmp_path / "offline"
    offline.mkdir()
    env = {**machine, "PATH": f"{fake_bin(offline, OFFLINE_APT)}:/usr/bin:/bin"}
    done = install(env)
    assert done.returncode == 1
    said = (
        f"{MIRROR} could not be reached (check the network, or apt's proxy): W: Failed to fetch "
        f"{MIRROR}/dists/trixie/InRelease  Temporary failure resolving 'mirror.example'"
    )
    assert f"nsys: Debian trixie non-free could not be had from {MIRROR}: {said}" in done.stdout
    assert f"nsys: could not download nsight-systems from {MIRROR} bookworm non-free: {said}" in done.stderr
    assert "Unable to locate package" not in done.stdout + done.stderr
    assert Path(machine["STUB_LOG"]).read_text().split() == ["update", "update"]  # no download tried


def test_a_debian_without_apt_get_is_told_what_is_missing(machine: dict[str, str], tmp_path: Path) -> None:
    """It said "this is not Debian/Ubuntu" of a Debian whose PATH lacks apt-get."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("dirname", "grep", "head", "sort", "mktemp", "rm", "cat"):
        found = shutil.which(tool, path="/usr/bin:/bin")
        assert found is not None
        (tools / tool).symlink_to(found)
    done = subprocess.run(
        [shutil.which("bash") or "bash", str(SCRIPT)],
        capture_output=True, text=True, env={**machine, "PATH": str(tools)},
    )  # fmt: skip
    assert done.returncode == 1
    assert "not Debian/Ubuntu" not in done.stderr
    assert done.stderr == (
        "nsys not found and apt-get is not on PATH, which this Debian/Ubuntu fetches it with: put apt-get on "
        "PATH (apt's own /usr/bin) and run `make setup` again, or install Nsight Systems from "
        "https://developer.nvidia.com/nsight-systems and set HARNESS_NSYS.\n"
    )


# a python whose `pip download` hangs until stopped, and then ends as pip does on Ctrl-C: exit 1, its own
# message; anything else runs the real python (the install unzips the wheel with it)
SLOW_PIP = """#!/usr/bin/env bash
if [[ "$1 $2 $3" == "-m pip download" ]]; then
  touch "$PIP_STARTED"
  trap 'echo "ERROR: Operation cancelled by user"; exit 1' INT TERM
  while :; do sleep 0.05; done
fi
exec {python} "$@"
"""


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"]
)
def test_a_signal_during_the_cupti_download_is_not_swallowed(
    machine: dict[str, str], tmp_path: Path, sig: int, code: int
) -> None:
    """Ctrl-C while pip fetched CUPTI 13.0: pip exits 1 and the install went on, exit 0, no CUPTI 13 and no
    word of it. Now it stops there with the signal's code and says CUPTI 13.0 is missing."""
    assert install(machine).returncode == 0
    cupti_of(machine).unlink()  # an installed 2023.4 without CUPTI 13: the next install fetches it
    pip = tmp_path / "slow-python"
    pip.write_text(SLOW_PIP.format(python=sys.executable))
    pip.chmod(0o755)
    started = tmp_path / "pip-started"
    env = {k: v for k, v in machine.items() if k != "HARNESS_CUPTI_WHEEL"}
    env.update(HARNESS_PIP_PYTHON=str(pip), PIP_STARTED=str(started))
    proc = subprocess.Popen(
        ["bash", str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=default_sigint,
    )  # fmt: skip
    try:
        wait_until(lambda: started.exists() or proc.poll() is not None, 60, "pip to start")
        os.killpg(proc.pid, sig)  # a terminal's Ctrl-C: the whole foreground group, pip with it
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, (out, err)
    assert (
        "nsys: interrupted: CUPTI 13.0 (nvidia-cuda-cupti==13.0.85) is missing, so nsys 2023.4.4.54 traces"
        in err
    )
    assert "run `make setup` again to add it" in err
    assert "added CUPTI" not in out and not cupti_of(machine).exists()
    assert not list((Path(machine["HARNESS_NSYS_ROOT"]) / TARGET).glob("*.part"))
