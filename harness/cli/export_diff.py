"""`harness diff A B` of two exports or traces (analysis.compare.export_diff): the answer first, then the
tables.

Table format: the sides, the verdict, the comparability and iterations lines, the largest kernel changes, the
headline figures (ms), then per table the `--top` largest changes (default: as many as fit the terminal's
height) and one line on what is not shown. csv: the headline and every row of every table; json: every
headline figure with its unit, the verdict, the comparability, and every table's rows; markdown: the same
as the table format, for a pull request.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.cli.common import count_option, err, text_option, warn
from harness.cli.csv_out import write_csv
from harness.cli.nvtx_options import NvtxBy
from harness.cli.option_group import F, option_group
from harness.cli.terminal.output import (
    console_for,
    emit,
    markdown_table,
    markdown_text,
    print_lines,
    to_records,
)
from harness.cli.terminal.text import distinct

if TYPE_CHECKING:
    import pandas as pd

    from harness.experiments.diff import ExportDiff, Side, Verdict

from harness.experiments import diff as hd

IterationRangeOpt = Annotated[
    str | None,
    text_option(
        "--iteration-range",
        "<name>",
        "an NVTX range's name",
        "Two exports: the NVTX range that marks an iteration (default: the harness's `step` "
        "ranges, else Kineto's ProfilerStep#N).",
    ),
]
IterationOpt = Annotated[
    int | None,
    count_option(
        "--iteration",
        0,
        "Two exports: figures and tables of iteration N of each side only, numbered as `timeline --step` "
        "numbers steps (the harness's step index, ProfilerStep#N's N; else from 0, warm-up included); the "
        "verdict still uses every iteration.",
    ),
]
WarmupOpt = Annotated[
    int, count_option("--warmup", 0, "Two exports: iterations left out at the start of each side.")
]
ByOpt = Annotated[
    NvtxBy, typer.Option("--by", help="Two exports: NVTX ranges by operator, or operator and input sizes.")
]
RawNamesOpt = Annotated[
    bool, typer.Option("--raw-names", help="Two exports: NVTX range names as recorded (no grouping).")
]


@dataclass(frozen=True)
class TwoExports:
    """The options of `diff` that only two exports take (`two_export_options` puts them on it): the
    iterations compared and how NVTX ranges are grouped."""

    iteration_range: IterationRangeOpt = None
    iteration: IterationOpt = None
    warmup: WarmupOpt = 0
    by: ByOpt = NvtxBy.op
    raw_names: RawNamesOpt = False


AS_RECORDED = TwoExports()  # every iteration, NVTX ranges by operator


def two_export_options() -> Callable[[F], F]:
    """The two-export options on a command, in place of its parameter `exports: TwoExports`."""
    return option_group("exports", TwoExports)


# the diff tables on screen: short headers, so that a name and A, B, Δ, Δ (%) fit 80 columns
SHOWN = {
    "Name": "Name", "Total Time A (ns)": "A (ns)", "Total Time B (ns)": "B (ns)",
    "Δ Total Time (ns)": "Δ (ns)", "Δ Total Time (%)": "Δ (%)", "Instances A": "Count A",
    "Instances B": "Count B", "Change": "Change",
}  # fmt: skip
DECIDING = ["Name", "Δ (ns)", "B (ns)", "A (ns)"]
PRIORITY = ["Δ (%)", "Change", "Count B", "Count A"]  # short of room, B's count before A's
MIN_ROWS = 5
TABLE_LINES = 7  # a table's title, header (two lines), borders and note, besides its rows


def _pct(x: float) -> str:
    return "—" if math.isnan(x) else f"{x:+.1f}%"


def verdict_line(v: Verdict) -> str:
    if v.comparison is None:
        return f"verdict: {v.verdict} ({v.reason})"
    c = v.comparison
    ci = f"{c.confidence:.0%} CI {_pct(c.ci_low_pct)} to {_pct(c.ci_high_pct)}"
    if math.isnan(c.ci_low_pct):
        ci = "no interval"
    weaker = " [weaker: no iterations]" if v.weaker else ""
    return f"verdict: {v.verdict}{weaker}: {v.basis} {_pct(c.effect_pct)} ({ci}); {v.reason}"


def comparability_line(d: ExportDiff) -> str:
    c = d.comparability
    parts = [f"GPUs {c.gpus[0]} → {c.gpus[1]}"]
    if c.other_models:
        parts[0] += " (" + " → ".join(", ".join(m) for m in c.models) + ")"
    parts.append(
        f"schema {c.schema[0]}" if c.schema[0] == c.schema[1] else f"schema {c.schema[0]} → {c.schema[1]}"
    )
    if not math.isnan(c.names_common_pct):
        parts.append(f"kernel names in common {c.names_common_pct:.1f}%")
    if not math.isnan(c.kernel_ratio):
        parts.append(f"kernels {c.kernels[0]:,} → {c.kernels[1]:,} (×{c.kernel_ratio:.2f})")
    head = "comparable" if c.comparable else "NOT comparable"
    return f"{head}: " + ", ".join(parts)


def iterations_line(d: ExportDiff) -> str:
    def one(label: str, side: Any) -> str:
        its = side.iterations
        if not its.source:
            return f"{label} none"
        warm = f", {its.warmup} warm-up left out" if its.warmup else ""
        return f"{label} {its.count} ({its.source}{warm})"

    line = "iterations: " + "; ".join([one("A", d.a), one("B", d.b)])
    if not d.a.iterations.source and not d.b.iterations.source:
        line += " (no `step` or ProfilerStep#N ranges; --iteration-range NAME names a repeated NVTX range)"
    if d.iteration is not None:
        line += f"; figures and tables of iteration {d.iteration} only"
    return line


def changes_lines(d: ExportDiff, width: int | None = None, text: Callable[[str], str] = str) -> list[str]:
    """The top regression and improvement among kernels; names shortened in the middle to fit `width`, each
    as `text` shows it (markdown_text: as text in Markdown)."""

    up, down = d.top_changes()
    found = (("top regression", up), ("top improvement", down))
    rows = [(word, row) for word, row in found if row is not None]
    rests = []
    for _, row in rows:
        delta, count_a, count_b = row["Δ Total Time (ns)"], row["Instances A"], row["Instances B"]
        rests.append(f" {delta / 1e6:+,.2f} ms ({count_a:,} → {count_b:,} launches)")
    names = [str(row["Name"]) for _, row in rows]
    if width is not None and names:  # one width for both, so that two names shortened alike stay apart
        pairs = zip(rows, rests, strict=True)
        room = min(max(24, width - len(word) - 2 - len(rest)) for (word, _), rest in pairs)
        names = distinct(names, room)[0]
    return [f"{word}: {text(name)}{rest}" for (word, _), name, rest in zip(rows, names, rests, strict=True)]


def headline_lines(d: ExportDiff, width: int | None = None, text: Callable[[str], str] = str) -> list[str]:
    """The answer first, in lines; the sides' names and the kernels' as `text` shows them."""
    lines = [
        f"A = {text(d.a.label)}",
        f"B = {text(d.b.label)}",
        verdict_line(d.verdict),
        comparability_line(d),
    ]
    lines.append(iterations_line(d))
    return lines + changes_lines(d, width, text)


def default_top(d: ExportDiff) -> int:
    """Rows per table so that the tables after the headline about fill the terminal's height."""
    height = shutil.get_terminal_size((80, 24)).lines
    used = 8 + len(d.headline) + TABLE_LINES
    return max(MIN_ROWS, (height - used) // max(len(d.tables), 1) - TABLE_LINES)


def shown(df: pd.DataFrame, top: int) -> pd.DataFrame:
    out = df.head(top)[list(SHOWN)].rename(columns=SHOWN)
    out.attrs.update(deciding=DECIDING, priority=PRIORITY)
    return out


def _left_out(df: pd.DataFrame, top: int) -> list[str]:
    hidden = len(df) - min(top, len(df))
    if not hidden:
        return []
    return [
        f"{hidden:,} of {len(df):,} rows not shown: --top {len(df)} shows them all, --format csv every row"
    ]


def _headline_frame(d: ExportDiff, machine: bool) -> pd.DataFrame:
    h = d.headline.copy()
    if machine:
        for col in ("A (ns)", "B (ns)", "Δ (ns)"):
            h[col] = h[col].round().astype("Int64")  # whole ns; <NA> where a side lacks the figure
        h.insert(0, "Key", h.attrs["keys"])
        h.insert(2, "Unit", "ns")
    return h


def render(
    d: ExportDiff,
    fmt: str,
    top: int | None,
    wide: bool,
    gate: float | None,
    out: Path | None = None,
    inputs: Sequence[str | Path | None] = (),
) -> None:

    if fmt == "json":
        doc = to_json(d, gate)
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return
    if fmt == "csv":
        tables = [("Headline (B against A)", _headline_frame(d, True))]
        tables += [(f"{t} (sorted by |Δ Total Time|)", df) for t, df in d.tables]
        write_csv(tables, out, [*headline_lines(d, 120), *d.notes], inputs)
        return
    rows = top or default_top(d)
    if fmt == "markdown":
        parts = [f"- {line}" for line in headline_lines(d, text=markdown_text)]
        parts.append(f"\n### Headline (ms)\n\n{markdown_table(d.headline)}")
        for title, df in d.tables:
            parts.append(f"### {title}: largest changes\n\n{markdown_table(shown(df, rows))}")
            parts += [f"{markdown_text(line)}\n" for line in _left_out(df, rows)]
        notes = [*([d.grouping] if d.grouping else []), *d.notes]  # what the table format notes too
        if notes:
            parts.append("\n" + "\n".join(f"- note: {markdown_text(n)}" for n in notes))
        sys.stdout.write("\n".join(parts) + "\n")
        return
    console = console_for()
    for i, line in enumerate(headline_lines(d, console.width)):
        style = "bold" if i == 2 else ""
        print_lines(console, line, style=style, keep="")  # a name with a newline stays on its line
    title = (
        "B against A; GPU time: kernels summed; the indented rows split each device's span, summed "
        "(comm.: communication, NCCL kernels)"
    )
    # the notes go under the last table: under the headline where there is no other
    emit(d.headline, "table", title=title, notes=[] if d.tables else d.notes, wide=wide)
    for i, (name, df) in enumerate(d.tables):
        notes = _left_out(df, rows)
        if name == "NVTX ranges" and d.grouping:
            notes.append(d.grouping)
        if i == len(d.tables) - 1:
            notes += d.notes
        emit(shown(df, rows), "table", title=f"{name}: largest changes first", notes=notes, wide=wide)


def to_json(d: ExportDiff, gate: float | None) -> dict[str, Any]:

    v, c = d.verdict, d.comparability
    comp = v.comparison
    up, down = d.top_changes()

    def side(s: Any) -> dict[str, Any]:
        its = s.iterations
        return {
            "label": s.label, "format": s.format, "schema": s.schema, "gpus": s.gpus, "kernels": s.kernels,
            "iterations": {"source": its.source or None, "count": its.count, "warmup": its.warmup,
                           "durations_ns": [int(x) for x in its.durations]},
        }  # fmt: skip

    def change(row: Any) -> dict[str, Any] | None:
        if row is None:
            return None
        return {"name": row["Name"], "delta_ns": int(row["Δ Total Time (ns)"]), "unit": "ns",
                "count_a": int(row["Instances A"]), "count_b": int(row["Instances B"])}  # fmt: skip

    def num(x: float) -> float | None:
        return None if x is None or math.isnan(x) else float(x)

    doc: dict[str, Any] = {
        "a": side(d.a),
        "b": side(d.b),
        "iteration": d.iteration,
        "figures": d.figures(),
        "verdict": {
            "verdict": v.verdict, "basis": v.basis or None, "weaker": v.weaker, "reason": v.reason,
            "effect_pct": num(comp.effect_pct) if comp else None,
            "ci_low_pct": num(comp.ci_low_pct) if comp else None,
            "ci_high_pct": num(comp.ci_high_pct) if comp else None,
            "confidence": comp.confidence if comp else None,
            "samples_a": comp.baseline_samples if comp else None,
            "samples_b": comp.treatment_samples if comp else None,
            "unit": "%",
        },
        "comparability": {
            "comparable": c.comparable, "reasons": list(c.reasons), "gpus_a": c.gpus[0], "gpus_b": c.gpus[1],
            "schema_a": c.schema[0], "schema_b": c.schema[1], "kernels_a": c.kernels[0],
            "kernels_b": c.kernels[1], "kernel_names_common_pct": num(c.names_common_pct),
            "kernel_count_ratio": num(c.kernel_ratio), "gpu_models_a": list(c.models[0]),
            "gpu_models_b": list(c.models[1]),
        },
        "top_regression": change(up),
        "top_improvement": change(down),
        "nvtx_grouping": d.grouping or None,
        "tables": {t: to_records(df) for t, df in d.tables},
        "notes": d.notes,
    }  # fmt: skip
    if gate is not None:
        doc["gate_pct"] = gate
        doc["gate_judged"] = v.comparison is not None  # no verdict: the gate fails, as it cannot judge
        doc["gate_failed"] = not doc["gate_judged"] or hd.gate_failed(v, gate)
    return doc


def compute(side_a: Side, side_b: Side, exports: TwoExports, *, cache: bool) -> ExportDiff:
    return hd.diff_exports(
        side_a, side_b, cache=cache, iteration_range=exports.iteration_range, iteration=exports.iteration,
        warmup=exports.warmup, by=exports.by.value, raw_names=exports.raw_names,
    )  # fmt: skip


def apply_gate(d: ExportDiff, gate: float) -> None:
    """Exit 1 with one line on a regression verdict beyond `gate` percent, or on no verdict at all (refused:
    the two are not comparable; none: nothing to judge): a gate that cannot judge does not pass."""

    if d.verdict.comparison is None:
        err(f"gate: cannot be judged, no verdict: {d.verdict.reason}")
        raise typer.Exit(1)
    if hd.gate_failed(d.verdict, gate):
        c = d.verdict.comparison
        assert c is not None
        weaker = " (weaker: no iterations)" if d.verdict.weaker else ""
        err(f"gate: regression beyond {gate:g}%: {d.verdict.basis} {c.effect_pct:+.1f}%{weaker}")
        raise typer.Exit(1)
    if blind := hd.export_gate_blind(d.verdict, gate):
        warn(blind)
