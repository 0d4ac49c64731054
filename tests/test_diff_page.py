"""`harness diff A B --html OUT`: the page of ranked diff bars and per-phase verdicts, read from the file.

The figures are decoded from the written HTML itself (the JSON plotly.js is handed), so what is checked is
what a browser draws.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import measure_drift
from test_diff import CPU_TRAIN, SHARED, derived_copy, make_run
from typer.testing import CliRunner

from analysis.compare.diff import diff_kernels
from analysis.dashboard.diff import diff_figure, table_panel
from analysis.trace.opening import open_trace
from harness.cli import app
from harness.profilers.capture import save as save_run
from harness.store.results import ResultsStore

runner = CliRunner()
KINETO = SHARED / "kineto"


def _array(value: object) -> list:
    """A plotly JSON array: a list, or a typed array {"dtype", "bdata"} (base64)."""
    if isinstance(value, dict) and "bdata" in value:
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"])).tolist()
    return list(value)  # type: ignore[call-overload]


def page_figures(html: str) -> dict[str, list[dict]]:
    """{div id: traces} of every figure on the page."""
    out = {}
    for m in re.finditer(r'Plotly\.newPlot\(\s*"([^"]+)",\s*', html):
        traces, _ = json.JSONDecoder().raw_decode(html, m.end())
        out[m.group(1)] = traces
    return out


def sections(html: str) -> dict[str, str]:
    """{panel key: its section's HTML}."""
    return dict(re.findall(r'<section class="panel" id="panel-([^"]+)".*?>(.*?)</section>', html, re.S))


def test_page_of_two_profiled_runs_has_the_ranked_bars_and_the_verdicts(tmp_db: str, tmp_path: Path) -> None:
    derived = derived_copy(tmp_path, "backward", 1.5)
    store = ResultsStore(tmp_db)
    measure_drift(store, make_run("aa", noise=0.01, seed=5))
    save_run(store, make_run("base-1", noise=0.01, seed=1), nsys_sqlite=str(CPU_TRAIN))
    save_run(store, make_run("slow-1", noise=0.01, backward_scale=1.10, seed=2), nsys_sqlite=str(derived))
    out = tmp_path / "diff.html"
    r = runner.invoke(app, ["diff", "base-1", "slow-1", "--gate", "5", "--html", str(out)])
    assert r.exit_code == 1, r.output  # the gate still decides the exit status
    assert f"note: wrote {out} (2 of 2 panels drawn)" in r.stderr
    html = out.read_text()
    assert "A = <code>base-1</code>, B = <code>slow-1</code>." in html

    figures = page_figures(html)
    assert set(figures) == {"fig-verdicts", "fig-diff-0"}
    (bar,) = figures["fig-diff-0"]
    assert bar["y"] == ["backward"]  # only backward changed: 8 ranges, each 1.5× as long
    assert _array(bar["x"]) == pytest.approx([85_643_923 * 0.5 / 1e6], abs=0.01)  # ms
    panels = sections(html)
    assert "NVTX ranges: top 1 of 4 by |Δ total time|" in panels["diff-0"]
    assert "1 changed; 3 the same." in panels["diff-0"]

    by_verdict = {t["name"]: t for t in figures["fig-verdicts"]}
    regression = by_verdict["regression"]
    assert "backward" in regression["y"] and "overall (step)" in regression["y"]
    effect = dict(zip(regression["y"], _array(regression["x"]), strict=True))
    assert 8 < effect["backward"] < 12  # a 10% slowdown in backward
    low = _array(regression["error_x"]["arrayminus"])[regression["y"].index("backward")]
    assert 0 < low < effect["backward"] - 5  # the CI's lower end is above +5%
    assert re.search(r"backward: regression, \+\d+\.\d% \(\+\d+\.\d…\+\d+\.\d\)", panels["verdicts"])


def test_page_marks_added_and_removed_kernels_from_a_real_pair(tmp_path: Path) -> None:
    control = KINETO / "diff-control" / "control.json.gz"
    test = KINETO / "diff-test" / "test.json.gz"
    out = tmp_path / "kineto.html"
    r = runner.invoke(app, ["diff", str(control), str(test), "--top", "8", "--html", str(out), "-f", "csv"])
    assert r.exit_code == 0, r.output
    html = out.read_text()
    with open_trace(control) as a, open_trace(test) as b:
        table = diff_kernels(a, b)
    changed = table[table["Change"] != "same"].head(8)
    counts = table["Change"].value_counts()
    assert (counts["added"], counts["removed"], counts["changed"], counts["same"]) == (27, 66, 102, 2)

    panels = sections(html)
    assert "Kernels: top 8 of 197 by |Δ total time|" in panels["diff-0"]
    assert "27 added, 66 removed, 102 changed; 2 the same." in panels["diff-0"]
    assert "iteration time: regression, +60.1%" in panels["verdicts"]  # ProfilerStep#N ranges, 6 a side
    (bar,) = page_figures(html)["fig-diff-0"]
    assert _array(bar["x"]) == pytest.approx((changed["Δ Total Time (ns)"].iloc[::-1] / 1e6).tolist())
    assert "volta_sgemm_128x32_nt (added)" in bar["y"]
    hatched = [y for y, shape in zip(bar["y"], bar["marker"]["pattern"]["shape"], strict=True) if shape]
    assert hatched and all(y.endswith(("(added)", "(removed)")) for y in hatched)
    assert len(set(bar["y"])) == len(bar["y"])  # names that shorten alike stay separate bars


def test_unchanged_table_says_so_and_lookalike_names_stay_apart() -> None:
    same = pd.DataFrame(
        {"Name": ["k"], "Change": ["same"], "Instances A": [1], "Instances B": [1], "Δ Instances": [0],
         "Total Time A (ns)": [5], "Total Time B (ns)": [5], "Δ Total Time (ns)": [0],
         "Δ Total Time (%)": [0.0]}
    )  # fmt: skip
    panel = table_panel("diff-0", "Kernels", same)
    assert panel.figure is None and panel.missing == "no change: 1 kernels, same count and total time"
    long = "x" * 40
    twins = pd.concat([same, same], ignore_index=True).assign(
        Name=[f"{long}a{long}", f"{long}b{long}"], Change="added", **{"Δ Total Time (ns)": [2e6, 1e6]}
    )
    bar = diff_figure(twins).data[0]
    assert len(set(bar.y)) == 2 and list(bar.x) == [1.0, 2.0]


def test_unwritable_page_is_one_line(tmp_path: Path, cpu_export: Path) -> None:
    assert cpu_export == CPU_TRAIN  # the fixture skips (fails under CI) where ../shared is missing
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = runner.invoke(app, ["diff", str(CPU_TRAIN), str(CPU_TRAIN), "--html", str(blocker / "x.html")])
    assert r.exit_code == 2 and r.stdout == ""  # refused before any table is printed
    assert r.stderr.strip().splitlines() == [
        f"error: cannot write {blocker / 'x.html'}: {blocker} is a file, not a folder; pass --html to a "
        "writable path"
    ]
