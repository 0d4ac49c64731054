"""scripts/install-nsys.sh decides from the apt sources whether to add non-free, and takes back what it added.

The functions run against a temporary tree of sources files (HARNESS_APT_DIR); apt itself never runs here.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, missing

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


def bash(apt_dir: Path, code: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("bash") is None:
        missing("bash not found")
    return subprocess.run(
        ["bash", "-c", f'source "{SCRIPT}"; {code}'],
        capture_output=True, text=True, env={"HARNESS_APT_DIR": str(apt_dir), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def enabled(apt_dir: Path, component: str = "non-free", suite: str = "bookworm") -> bool:
    done = bash(apt_dir, f"component_enabled {component} {suite}")
    assert done.returncode in (0, 1), done.stderr
    return done.returncode == 0


def apt_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    for name, text in files.items():
        (apt / name).write_text(text)
    return apt


def snapshot(apt: Path) -> dict[str, str]:
    return {str(p.relative_to(apt)): p.read_text() for p in sorted(apt.rglob("*")) if p.is_file()}


DEB = "http://deb.debian.org/debian"
OURS = "sources.list.d/harness-nonfree.sources"
DEBIAN = "sources.list.d/debian.sources"


def stanza(
    components: str, suites: str = "bookworm bookworm-updates", types: str = "deb", extra: str = ""
) -> str:
    """A deb822 sources file: Debian's stanza with these fields, then the security stanza."""
    first = f"Types: {types}\nURIs: {DEB}\nSuites: {suites}\nComponents: {components}\n{extra}"
    return first + "\n" + DEBIAN_MAIN.split("\n\n")[1]


CASES = {
    "main only": ({DEBIAN: DEBIAN_MAIN}, False),
    "non-free among others": ({DEBIAN: stanza("main contrib non-free non-free-firmware")}, True),
    "non-free-firmware is not non-free": ({DEBIAN: stanza("main non-free-firmware")}, False),
    "stanza disabled": ({DEBIAN: stanza("main non-free", extra="Enabled: no\n")}, False),
    "deb-src only": ({DEBIAN: stanza("main non-free", types="deb-src")}, False),
    "another suite": ({DEBIAN: stanza("main non-free", suites="bookworm-updates")}, False),
    "our own earlier file": ({DEBIAN: DEBIAN_MAIN, OURS: stanza("non-free", "bookworm")}, True),
    "one-line format": ({"sources.list": f"deb {DEB} bookworm main contrib non-free\n"}, True),
    "one-line with options, a mirror": (
        {"sources.list": "deb [arch=amd64 signed-by=/k] http://mirror.example/d bookworm non-free"}, True),
    "commented out": ({"sources.list": f"# deb {DEB} bookworm non-free\ndeb {DEB} bookworm main\n"}, False),
    "one-line deb-src": ({"sources.list": f"deb-src {DEB} bookworm main non-free\n"}, False),
    "backports only": ({"sources.list.d/extra.list": f"deb {DEB} bookworm-backports non-free\n"}, False),
    "a file apt ignores": ({"sources.list.d/extra.list.disabled": f"deb {DEB} bookworm non-free\n"}, False),
    "no sources": ({}, False),
}  # fmt: skip


@pytest.mark.parametrize(("files", "expected"), list(CASES.values()), ids=list(CASES))
def test_component_enabled(tmp_path: Path, files: dict[str, str], expected: bool) -> None:
    assert enabled(apt_tree(tmp_path, files)) is expected


def test_ubuntu_multiverse(tmp_path: Path) -> None:
    line = "deb http://archive.ubuntu.com/ubuntu jammy main restricted universe multiverse\n"
    assert enabled(apt_tree(tmp_path, {"sources.list": line}), "multiverse", "jammy")
    assert not enabled(
        apt_tree(tmp_path / "b", {"sources.list": line.replace(" multiverse", "")}), "multiverse", "jammy"
    )


def test_adds_once_and_takes_back_what_it_added(tmp_path: Path) -> None:
    apt = apt_tree(tmp_path, {DEBIAN: DEBIAN_MAIN})
    before = snapshot(apt)
    assert not enabled(apt)
    added = bash(apt, "add_debian_component non-free bookworm")
    assert added.returncode == 0, added.stderr
    path = Path(added.stdout.strip())
    assert path == apt / "sources.list.d" / "harness-nonfree.sources"
    assert (
        "Suites: bookworm\nComponents: non-free\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg"
        in (path.read_text())
    )
    assert enabled(apt)  # a second run of the script finds it there and adds nothing
    assert bash(apt, f'remove_added "{path}"').returncode == 0
    assert snapshot(apt) == before and not enabled(apt)


def test_sourcing_runs_nothing(tmp_path: Path) -> None:
    apt = apt_tree(tmp_path, {})
    done = bash(apt, "type main >/dev/null && echo defined")
    assert done.returncode == 0 and done.stdout == "defined\n" and done.stderr == ""
    assert snapshot(apt) == {}
