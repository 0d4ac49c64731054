"""docs/notebook.md, written by running its cells: the Python door (analysis.front) on the H100 capture kept
in the repository (tests/data/h100/tiny-cupti13.sqlite.xz), each cell's code and what it printed.

    python scripts/notebook_page.py            write the page
    python scripts/notebook_page.py --check    exit 1 when the page differs from what its cells print

tests/test_docs.py fails when the page and its cells disagree. The cells run in a temporary folder with a
cache of their own, so that nothing read before changes what they print.
"""

from __future__ import annotations

import contextlib
import io
import lzma
import os
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "notebook.md"
CAPTURE = REPO / "tests" / "data" / "h100" / "tiny-cupti13.sqlite.xz"

INTRO = """\
# Notebooks and scripts

Everything the table commands, `harness health` and `harness advise` print is also a DataFrame in Python,
through one entry point: `analysis.front.open`. It reads exports, reports and Kineto traces through the same
front door and the same cache as the command line, so a table computed by one is served to the other. Times
are nanoseconds, as in `--format csv`. The [API reference](reference/api.md) lists every method.

The cells below ran on `h100-tiny.sqlite`: `harness run tiny` on an H100 under nsys 2023.4 with CUPTI 13.0,
the capture `make demo` unpacks into `demo/` (from `tests/data/h100/tiny-cupti13.sqlite.xz`). This page is
written by running them (`python scripts/notebook_page.py`), so every output is real and current.
"""

CELLS: list[tuple[str, str]] = [
    (
        "Open an export and ask for a table by its command's name: the same rows as `harness kernels`.",
        """\
import pandas as pd
from analysis import front

pd.set_option("display.width", 110)
pd.set_option("display.max_colwidth", 50)
pd.set_option("display.max_columns", None)

report = front.open("h100-tiny.sqlite")
kernels = report.table("kernels", top=5)
kernels[["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Name"]]""",
    ),
    (
        "A table's options are its command's, by name: `--by name` is `by=\"name\"`, and the format of "
        '`nsys stats` 2023.4 (one row per kernel name) is `stats_format="2023.4"`.',
        """\
report.table("kernels", by="name", stats_format="2023.4", top=3)[["Total Time (ns)", "Instances", "Name"]]""",
    ),
    (
        "A command that prints several tables gives them by title; each frame's `attrs` hold the notes "
        "the command prints beside it, and under `warnings` what it warns of (an export whose capture "
        "failed its [health](health.md) checks when they last ran). Options take the library's defaults: "
        "`nvtx-gpu` credits kernels to the harness's phases when it is given them, as the command line "
        "gives them by default.",
        """\
phases = report.tables("nvtx-gpu", phases=("forward", "backward", "optimizer"))
list(phases)""",
    ),
    (
        "",
        """\
phases["Do the phases add up? (measured steps)"]""",
    ),
    (
        "Can the capture be trusted? One row per check, as `harness health` prints them; `attrs` hold the "
        "worst status and the one-line verdict.",
        """\
health = report.health()
print(health.attrs["line"])
health[["Check", "Status"]]""",
    ),
    (
        "What to fix first, by the time at stake, as `harness advise` ranks it. A capture that failed its "
        "health checks gives no ranking (`UntrustedCapture`) unless asked with `ignore_health=True`.",
        """\
findings = report.findings()
findings[["Rule", "Time at stake (ns)", "Where"]]""",
    ),
    (
        "Thresholds by name (`analysis.advice.findings.Thresholds`): a stricter host-wait share.",
        """\
report.findings(host_wait_share=0.99)["Rule"].tolist()""",
    ),
    (
        'A figure is the dashboard\'s panel as a plotly figure: `"kernels"`, `"nvtx"` or '
        '`"timeline"`. In a notebook, `fig.show()` draws it; here, its bars.',
        """\
fig = report.figure("nvtx")
print(fig.layout.title.text)
[(phase, round(float(ms), 3)) for phase, ms in zip(fig.data[0].x, fig.data[0].y)]""",
    ),
    (
        "Several exports give one table over all of them (a `Ranks` column), or one block per rank "
        "with `by_rank=True`, as the command line's `harness kernels DIR` does.",
        """\
import shutil
import sqlite3

for rank in (0, 1):  # two ranks' exports; here copies of one, each made a file of its own
    shutil.copyfile("h100-tiny.sqlite", f"run.rank{rank}.sqlite")
    with sqlite3.connect(f"run.rank{rank}.sqlite") as con:
        con.execute(f"PRAGMA user_version = {rank + 1}")
both = front.open(["run.rank0.sqlite", "run.rank1.sqlite"], jobs=1).table("kernels", top=2)
both[["Ranks", "Total Time (ns)", "Instances", "Name"]]""",
    ),
]


def run_cell(code: str, scope: dict[str, object]) -> str:
    """What the cell printed, and the value of its last line as a notebook shows it."""
    *body, last = code.split("\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile("\n".join(body), "<cell>", "exec"), scope)
        try:
            value = eval(compile(last, "<cell>", "eval"), scope)
        except SyntaxError:
            exec(compile(last, "<cell>", "exec"), scope)
            value = None
    shown = out.getvalue()
    if value is not None:
        shown += repr(value) + "\n"  # as a console shows it (pandas' display options apply)
    return shown


def render() -> str:
    parts = [INTRO]
    with tempfile.TemporaryDirectory() as folder:
        here = Path.cwd()
        old_cache = os.environ.get("HARNESS_CACHE_DIR")
        os.environ["HARNESS_CACHE_DIR"] = str(Path(folder) / "cache")
        (Path(folder) / "h100-tiny.sqlite").write_bytes(lzma.decompress(CAPTURE.read_bytes()))
        os.chdir(folder)
        try:
            scope: dict[str, object] = {}
            for prose, code in CELLS:
                shown = run_cell(code, scope)
                assert "```" not in shown
                if prose:
                    parts.append(textwrap.fill(prose, 110, break_on_hyphens=False) + "\n")
                parts.append(f"```python\n{code}\n```\n")
                if shown:
                    parts.append(f"```text\n{shown}```\n")
        finally:
            os.chdir(here)
            if old_cache is None:
                os.environ.pop("HARNESS_CACHE_DIR", None)
            else:
                os.environ["HARNESS_CACHE_DIR"] = old_cache
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    page = render()
    if "--check" in argv:
        if not PAGE.is_file() or PAGE.read_text() != page:
            print(f"{PAGE.relative_to(REPO)} differs from its cells' output: python scripts/notebook_page.py")
            return 1
        return 0
    PAGE.write_text(page)
    print(f"wrote {PAGE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
