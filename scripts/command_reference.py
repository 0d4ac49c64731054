"""docs/reference/commands.md, written from the app itself: `harness --help` and each command's `--help`,
grouped by the panels of `harness --help` (harness.cli.COMMANDS), at 80 columns.

    python scripts/command_reference.py           write the page
    python scripts/command_reference.py --check   exit 1 when the page differs from the app (CI: make docs)

tests/test_docs.py fails when the page and the app disagree.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "reference" / "commands.md"
WIDTH = "80"

INTRO = """\
# Command reference

Every command's `--help`, grouped as `harness --help` groups them. This page is written from the app by
`python scripts/command_reference.py`, and `make docs` fails when it no longer matches. Tables print times
in milliseconds; `--format csv` and `--format json` give the same data in nanoseconds. The task pages of
this guide say when to use each command: [Run and sweep](../run.md), [Read an export](../analysis.md),
[Compare and gate](../compare.md).
"""


def help_text(words: list[str]) -> str:
    """`harness WORDS --help` as a terminal of 80 columns prints it."""
    from typer.testing import CliRunner

    from harness.cli import app

    result = CliRunner().invoke(app, [*words, "--help"], env={"COLUMNS": WIDTH, "LINES": "24"})
    if result.exit_code != 0:
        raise SystemExit(f"harness {' '.join(words)} --help exited {result.exit_code}: {result.output}")
    return result.stdout.rstrip() + "\n"


def block(text: str) -> str:
    assert "```" not in text, "a help text holds a code fence"
    return f"```text\n{text}```\n"


def render() -> str:
    """The whole page."""
    from harness.cli import PANELS, commands, load

    listed = commands()
    parts = [INTRO, "## harness\n", block(help_text([]))]
    for panel in PANELS:
        parts.append(f"## {panel}\n")
        for name, entry in listed.items():
            if entry.panel != panel:
                continue
            parts += [f"### harness {name}\n", block(help_text([name]))]
            for sub in getattr(load(name), "commands", {}):
                parts += [f"#### harness {name} {sub}\n", block(help_text([name, sub]))]
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    os.environ["COLUMNS"] = WIDTH
    page = render()
    if "--check" in argv:
        if not PAGE.is_file() or PAGE.read_text() != page:
            print(f"{PAGE.relative_to(REPO)} differs from the app: python scripts/command_reference.py")
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(page)
    print(f"wrote {PAGE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
