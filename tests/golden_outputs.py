"""The golden outputs: every analysis command on every fixture in ../shared/fixtures, and run, show, runs,
diff and dashboard on a fixed small CPU run, each as exit code, stdout and stderr in tests/golden/.

`python tests/golden_outputs.py` (or HARNESS_UPDATE_GOLDEN=1 with tests/test_golden.py) rewrites them;
tests/test_golden.py regenerates them in-process and compares. Wall times, ids and dates of the CPU runs
are masked (`mask`); the analysis outputs are kept exactly.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden"
FIXTURES = REPO.parent / "shared" / "fixtures"
UPDATE = os.environ.get("HARNESS_UPDATE_GOLDEN") == "1"
GZIP_OVER = 32_000  # bytes: bigger goldens are kept gzipped (tests/golden stays small)

ANALYSIS = (
    "kernels",
    "nvtx",
    "nvtx-gpu",
    "api",
    "memops",
    "launch",
    "osrt",
    "summary",
    "breakdown",
    "ranks",
    "advise",
    "health",
)
FORMATS = ("csv", "json")


def fixtures() -> dict[str, Path]:
    """name -> export or trace: every nsys export and Kineto trace in ../shared/fixtures."""
    found = sorted(FIXTURES.glob("nsys/**/*.sqlite")) + sorted(FIXTURES.glob("kineto/**/*.json.gz"))
    return {"-".join(p.relative_to(FIXTURES).parent.parts): p for p in found}


def analysis_cases() -> Iterator[tuple[str, list[str]]]:
    """(golden file name, command line) for every analysis command, format and fixture."""
    for name, path in fixtures().items():
        for cmd in ANALYSIS:
            for fmt in FORMATS:
                yield f"analysis/{name}/{cmd}.{fmt}", [cmd, str(path), "--format", fmt]
            if cmd == "breakdown":
                yield f"analysis/{name}/breakdown-all.csv", [cmd, str(path), "--all", "--format", "csv"]
    kineto = FIXTURES / "kineto"
    pair = [str(kineto / "diff-control" / "control.json.gz"), str(kineto / "diff-test" / "test.json.gz")]
    for fmt in FORMATS:
        yield f"analysis/diff-kineto.{fmt}", ["diff", *pair, "--format", fmt]


def invoke(args: list[str], tmp: Path | None = None, **env: str) -> str:
    """Exit code, stdout and stderr of `harness ARGS`; with `tmp`, masked (see `mask`)."""
    from typer.testing import CliRunner

    from harness.cli import app

    columns = "1000" if tmp is not None else "200"  # runs' tables: never wrapped, whatever their numbers
    # the goldens are in 2022.4's stats format, whichever nsys is installed (analysis.tables.stats_format)
    result = CliRunner().invoke(app, args, env={"COLUMNS": columns, "HARNESS_STATS_FORMAT": "2022.4", **env})
    out, err = (text.replace(str(FIXTURES), "FIXTURES") for text in (result.stdout, result.stderr))
    if tmp is not None:
        out, err = mask(out, tmp), mask(err, tmp)
    return f"exit {result.exit_code}\n--- stdout\n{out}--- stderr\n{err}"


TABLE_ROW = re.compile(r"(?m)^[│|].*$")
# `harness show`'s environment fields that the machine decides, as csv (`env.host,vm`) or json
# (`"env.host": "vm"`): the value, quoted or not, up to the end of the cell
MACHINE_FIELD = re.compile(r'(env\.(?:host|platform|torch|cuda)"?[,:] ?)("[^"\n]*"|[^,\n]*)')


def mask(text: str, tmp: Path) -> str:
    """What changes from run to run, masked: progress lines (their timing) and table header rows dropped;
    numbers (times, dates, sizes) as 9, run ids' random suffix as XXXX, the git commit as HEX; the
    verdicts of two runs' phases (noise decides them with two steps each) as VERDICT; what the machine
    decides (its CPU's name as CPU, its host name, platform and torch build as MACHINE); and the table
    frame's padding (its widths follow the numbers) squeezed to one space."""
    from harness.core.devices import cpu_name

    # progress lines, and a table's header rows (where rich wraps a header follows its numbers' widths)
    drop = ("progress: ", "┃")
    text = "".join(line for line in text.splitlines(keepends=True) if not line.startswith(drop))
    text = text.replace(str(tmp), "TMP")
    name = cpu_name()
    for form in dict.fromkeys((name, json.dumps(name)[1:-1])):  # as printed, and inside a JSON string
        text = text.replace(form, "CPU")
    text = MACHINE_FIELD.sub(r"\1MACHINE", text)
    text = re.sub(r"\\u[0-9a-fA-F]{4}", "ESC", text)  # json's escapes are not numbers
    text = re.sub(r"(\d{8}-\d{6})-(?:[0-9a-f]{8}|[0-9a-f]{4})\b", r"\1-XXXX", text)
    # the commit by its field first: one of only digits (0704341) or only letters is a commit too
    text = re.sub(r"(git_commit(?:\W|value)*?)[0-9a-f]{6,40}\b", r"\1HEX", text)
    text = re.sub(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{6,40}\b", "HEX", text)
    text = re.sub(r"-?\d+(\.\d+)?(e[-+]?\d+)?", "9", text)
    text = TABLE_ROW.sub(lambda m: re.sub(r"9(,9)+", "9", m.group(0)), text)  # thousands separators
    detail = r"(faster|slower) 9% \(9(…|ESC)9\)|inconclusive \((±|ESC)9%\)|\+?9% \(\+?9(…|ESC)\+?9\)"
    text = re.sub(detail, "DETAIL", text)
    text = re.sub(r"\b(improvement|regression|inconclusive)\b", "VERDICT", text)
    return re.sub(r"[ ─━]+", " ", text)


def run_cases(tmp: Path) -> Iterator[tuple[str, str]]:
    """(golden file name, masked output) of run, runs, show, diff and dashboard on two small CPU runs."""
    db = str(tmp / "runs.sqlite")
    base = ["run", "tiny", "--device", "cpu", "--steps", "2", "--warmup", "1", "--seed", "0", "--db", db]
    env = {"HARNESS_CACHE_DIR": str(tmp / "cache")}
    for fmt in ("table", "json"):
        yield f"runs/run.{fmt}", invoke([*base, "--format", fmt], tmp, **env)
    yield "runs/run-csv", invoke([*base, "--format", "csv"], tmp, **env)
    for fmt in ("csv", "json"):
        yield f"runs/runs.{fmt}", invoke(["runs", "--db", db, "--format", fmt], tmp)
    from harness.store.results import ResultsStore

    ids = list(ResultsStore(db, readonly=True).runs()["run_id"])
    for fmt in ("csv", "json"):
        yield f"runs/show.{fmt}", invoke(["show", ids[0], "--db", db, "--format", fmt], tmp)
        yield f"runs/diff.{fmt}", invoke(["diff", ids[0], ids[1], "--db", db, "--format", fmt], tmp)
    yield "runs/diff.markdown", invoke(["diff", ids[0], ids[1], "--db", db, "--format", "markdown"], tmp)
    page = tmp / "dash.html"
    for fmt in ("csv", "json"):
        dash = ["dashboard", "--db", db, "--out", str(page), "--format", fmt]
        yield f"runs/dashboard.{fmt}", invoke(dash, tmp, **env)


def path_of(name: str, text: str) -> Path:
    return GOLDEN / (f"{name}.txt.gz" if len(text.encode()) > GZIP_OVER else f"{name}.txt")


def read(name: str) -> str | None:
    for path in (GOLDEN / f"{name}.txt", GOLDEN / f"{name}.txt.gz"):
        if path.exists():
            data = path.read_bytes()
            return (gzip.decompress(data) if path.suffix == ".gz" else data).decode()
    return None


def write(name: str, text: str) -> None:
    for old in (GOLDEN / f"{name}.txt", GOLDEN / f"{name}.txt.gz"):
        old.unlink(missing_ok=True)
    path = path_of(name, text)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode()
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)


def check(name: str, text: str) -> str | None:
    """None when `text` equals the golden `name` (or it was rewritten); else what differs, briefly."""
    if UPDATE:
        write(name, text)
        return None
    want = read(name)
    if want is None:
        return f"{name}: no golden file (HARNESS_UPDATE_GOLDEN=1 writes it)"
    if want == text:
        return None
    import difflib

    diff = difflib.unified_diff(want.splitlines(), text.splitlines(), "golden", "now", lineterm="", n=1)
    return f"{name} differs:\n" + "\n".join(list(diff)[:20])


if __name__ == "__main__":
    import tempfile

    os.environ["HARNESS_UPDATE_GOLDEN"] = "1"
    UPDATE = True
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["HARNESS_CACHE_DIR"] = str(Path(tmp) / "cache")
        only = sys.argv[1:]
        for name, args in analysis_cases():
            if not only or any(o in name for o in only):
                write(name, invoke(args))
        if not only or "runs" in only:
            for name, text in run_cases(Path(tmp)):
                write(name, text)
