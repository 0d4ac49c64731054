"""Panel 3: profiler overhead per phase (without vs with nsys or torch.profiler, each its own bars) with
intervals and verdicts; NVTX agreement."""

from __future__ import annotations

import pandas as pd

from analysis.compare.overhead import (
    BASELINE,
    STEP_SUM,
    Comparison,
    baseline_label,
    comparisons,
    mean_interval,
    ordered_labels,
    overhead_steps,
    overhead_verdict,
    step_rows,
    worded,
    words_of,
)
from analysis.dashboard.panel import DashboardData, Panel
from analysis.dashboard.runs import profiler_label, programs_only, with_labels
from analysis.dashboard.style import MS, TEMPLATE, grouped_bars, hover, ns_ms, ordered_phases, phase_color
from workloads.names import MEASURED_STATUSES, counted

SAME_CONFIG = ["model", "mode", "device", "precision", "compile", "batch_size", "context_length",
               "new_tokens", "attention"]  # fmt: skip
PATTERNS = ("", "/", "x", ".")


def _label(run: dict, baseline: str = BASELINE) -> str:
    return profiler_label(run) or baseline


def overhead_runs(runs: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The runs to compare and where they come from.

    The newest `harness overhead` experiment with two runs or more a side (else the newest with one each, as
    `harness run --nsys` makes); failing that, the newest configuration that has runs both without and with a
    profiler (made separately, so machine drift is not controlled for).
    """
    ok = runs[runs["status"].isin(MEASURED_STATUSES)] if not runs.empty else runs
    if ok.empty:
        return ok, ""

    def both(group: pd.DataFrame) -> bool:
        return bool((group["profiler"] == "none").any() and (group["profiler"] != "none").any())

    def repeated(group: pd.DataFrame) -> bool:
        return bool(group["profiler"].eq("none").value_counts().min() >= 2)

    exp = ok["experiment"].fillna("")
    overhead = ok[exp.str.startswith("overhead-")]
    paired = [(n, g) for n, g in reversed(list(overhead.groupby("experiment", sort=False))) if both(g)]
    # an alternated `harness overhead` experiment over a newer `run --nsys` pair of one run each
    if paired:
        name, group = sorted(paired, key=lambda p: not repeated(p[1]))[0]  # stable: newest first
        return group, f"experiment {name}"
    keys = [k for k in SAME_CONFIG if k in ok]
    for _, group in reversed(list(ok.groupby(keys, sort=False, dropna=False))):
        if both(group):
            return group, "separate runs of the same configuration (not alternated)"
    return ok.iloc[0:0], ""


def labelled_steps(runs: pd.DataFrame, steps: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """Measured steps of `runs` labelled by profiler (`baseline` without one), each run a repeat of its
    label: label, repeat, step, phase, duration_ns (analysis.compare.overhead.overhead_steps)."""
    labels = {r["run_id"]: (_label(r, baseline), i) for i, r in enumerate(runs.to_dict("records"))}
    mine = steps[steps["run_id"].isin(labels)]
    return overhead_steps((*labels[rid], part) for rid, part in mine.groupby("run_id", sort=False))


# the label over a profiled bar: the verdict's bar words (analysis.compare.overhead.VERDICT_WORDS)
BAR_WORDS = words_of("bar")


def bar_label(c: Comparison) -> str:
    """The label over a profiled bar (BAR_WORDS): `adds +8.1% (CI +2.0…+14.3%)`, `inconclusive (CI
    −40.1…+52.3%)`, `faster −5.0% (CI …): not overhead`."""
    return worded(c, BAR_WORDS)


def overhead_bars(steps: pd.DataFrame, phases: list[str], baseline: str = BASELINE) -> pd.DataFrame:
    """What the overhead bars draw, one row per phase (and whole steps) and label.

    row, label, mean_ns, low_ns, high_ns (95% interval of the mean), and for the labels compared with the
    baseline: effect_pct, ci_low_pct, ci_high_pct, outcome, verdict, short.
    """
    found = comparisons(steps, phases, baseline)
    rows = []
    for name, part in step_rows(steps, phases):
        for label in ordered_labels(steps, baseline):
            mean, low, high = mean_interval(part[part["label"] == label], run="repeat")
            row = {"row": name, "label": label, "mean_ns": mean, "low_ns": low, "high_ns": high}
            c = found.get((name, label))
            if c is not None:
                row |= {
                    "effect_pct": c.effect_pct,
                    "ci_low_pct": c.ci_low_pct,
                    "ci_high_pct": c.ci_high_pct,
                    "outcome": c.outcome,
                    "verdict": overhead_verdict(c, label),
                    "short": bar_label(c),
                }
            rows.append(row)
    cols = ["row", "label", "mean_ns", "low_ns", "high_ns", "effect_pct", "ci_low_pct", "ci_high_pct"]
    return pd.DataFrame(rows).reindex(columns=[*cols, "outcome", "verdict", "short"])


def overhead_figure(table: pd.DataFrame, baseline: str = BASELINE):
    """Bars per phase (phase colours), one bar per label, whiskers the 95% interval of the mean (never below
    zero); the profiled bars hatched, and over each the overhead with its interval, or `inconclusive`."""
    import plotly.graph_objects as go

    fig = go.Figure()
    names = list(dict.fromkeys(table["row"]))
    colors = [phase_color(str(p).split()[0], i) for i, p in enumerate(names)]
    for i, label in enumerate(dict.fromkeys(table["label"])):
        t = table[table["label"] == label].set_index("row").reindex(names)
        compared = label != baseline
        up = (t["high_ns"] - t["mean_ns"]).fillna(0)
        down = (t["mean_ns"] - t["low_ns"]).clip(upper=t["mean_ns"]).fillna(0)  # no whisker below zero
        verdict = t["verdict"].fillna("baseline") if compared else pd.Series("baseline", index=t.index)
        fig.add_trace(
            go.Bar(
                name=label,
                x=names,
                y=t["mean_ns"] / MS,
                error_y={"type": "data", "array": (up / MS).tolist(), "arrayminus": (down / MS).tolist()},
                marker={"color": colors, "pattern": {"shape": PATTERNS[i % len(PATTERNS)]}},
                offsetgroup=str(i),
                customdata=pd.DataFrame(
                    {
                        "ns": t["mean_ns"],
                        "low": t["low_ns"] / MS,
                        "high": t["high_ns"] / MS,
                        "verdict": verdict,
                    }
                ).to_numpy(),
                hovertemplate=hover(
                    f"%{{x}} · {label}",
                    ns_ms("mean", "y", "customdata[0]"),
                    "95% interval of the mean: %{customdata[1]:,.3f} … %{customdata[2]:,.3f} ms",
                    "%{customdata[3]}",
                ),
            )
        )
        if compared:  # the verdict above the whisker, where bar text would be crossed by it
            fig.add_trace(
                go.Scatter(
                    name=f"{label} verdict",
                    x=names,
                    y=(t["mean_ns"] + up) / MS,
                    text=t["short"].fillna("").tolist(),
                    mode="text",
                    textposition="top center",
                    textfont={"size": 12},
                    offsetgroup=str(i),
                    cliponaxis=False,
                    showlegend=False,
                    hoverinfo="skip",
                )
            )
    top = float((table["high_ns"].fillna(table["mean_ns"])).max() / MS) if len(table) else 0.0
    fig.update_layout(
        template=TEMPLATE,
        barmode="group",
        scattermode="group",  # the verdict texts sit over their own bar of each group
        height=460,
        yaxis={"title": "mean time per step (ms); whiskers: 95% interval", "range": [0, top * 1.25]},
        xaxis_title="phase",
        legend_title_text="profiler (hatched: profiled)",
    )
    return fig


def overhead_panel(data: DashboardData) -> Panel:
    runs, source = overhead_runs(data.runs)
    if runs.empty:
        return Panel(
            missing="no runs both without and with a profiler: run `harness overhead tiny --device cpu` "
            "(--profiler torch for torch.profiler; or `harness run tiny --nsys` beside a run without it)"
        )
    phases = ordered_phases(data.steps.loc[data.steps["run_id"].isin(runs["run_id"]), "phase"])
    baseline = baseline_label(runs["profiler"])
    table = overhead_bars(labelled_steps(runs, data.steps, baseline), phases, baseline)
    first = runs.iloc[0]
    title = f"Profiler overhead: {first['model']} {first['precision']} on {first.get('device', '')}, {source}"
    counts = runs["profiler"].eq("none").value_counts()
    profiled = runs[runs["profiler"] != "none"]
    kinds = ", ".join(dict.fromkeys(_label(r) for r in profiled.to_dict("records")))
    notes = [
        f"{counted(int(counts.get(True, 0)), 'run')} without a profiler and {counts.get(False, 0)} with one "
        f"({kinds}), "
        "measured steps only. Whiskers: 95% interval of each mean. On each profiled bar: the overhead with "
        "its 95% interval, or inconclusive when the noise is larger than the effect."
    ]
    steps_row = table[(table["row"] == STEP_SUM) & table["verdict"].notna()]
    if steps_row.empty:
        steps_row = table[table["verdict"].notna()].tail(1)
    notes += [f"Whole steps: {v}." for v in steps_row["verdict"]]
    # every phase's verdict with its interval, not only the label on the bar
    phases_rows = table[(table["row"] != STEP_SUM) & table["verdict"].notna()]
    notes += [f"{r['row']}: {r['verdict']}." for r in phases_rows.to_dict("records")]
    if min(counts.get(True, 0), counts.get(False, 0)) < 2:
        notes.append(
            "One run on a side: the interval holds the step-to-step noise only, not run-to-run drift; "
            "`harness overhead --ci-target 5` alternates runs until it is under ±5%."
        )
    return Panel(figure=overhead_figure(table, baseline), title=title, notes=notes)


def agreement_figure(table: pd.DataFrame):
    """(NVTX − timer) / timer in percent, per run (x) and phase (colour)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for i, phase in enumerate(ordered_phases(table["phase"])):
        p = table[table["phase"] == phase]
        fig.add_trace(
            go.Bar(
                name=phase,
                x=p["label"],
                y=p["rel_diff"] * 100,
                marker_color=phase_color(phase, i),
                customdata=pd.DataFrame(
                    {
                        "nvtx": p["nvtx_mean_ns"],
                        "nvtx_ms": p["nvtx_mean_ns"] / MS,
                        "timer": p["timer_mean_ns"],
                        "timer_ms": p["timer_mean_ns"] / MS,
                        "steps": p["steps"],
                    }
                ).to_numpy(),
                hovertemplate=hover(
                    f"%{{x}} · {phase}",
                    "NVTX − timer: %{y:+.3f} %",
                    ns_ms("NVTX mean", "customdata[1]", "customdata[0]"),
                    ns_ms("timer mean", "customdata[3]", "customdata[2]"),
                    "%{customdata[4]} measured steps",
                ),
            )
        )
    return grouped_bars(fig, 400, "phase", x="profiled run", y="NVTX mean − timer mean (% of timer)")


def agreement_panel(data: DashboardData) -> Panel:
    if data.agreement.empty or data.runs.empty:
        profiled = data.runs[data.runs["profiler"] != "none"] if "profiler" in data.runs else data.runs[:0]
        if programs_only(profiled):
            return Panel(
                missing="no profiled run with timers: runs of `profile -- CMD` time no phase to compare "
                "with their NVTX ranges; run `harness run tiny --device cpu --nsys`"
            )
        return Panel(missing="no profiled runs: run `harness run tiny --device cpu --nsys`")
    labels = with_labels(data.runs)[["run_id", "label"]]
    table = data.agreement.merge(labels, on="run_id", how="inner")
    if table.empty:
        return Panel(
            missing="no agreement rows for the selected runs: run `harness run tiny --device cpu --nsys`"
        )
    return Panel(figure=agreement_figure(table))
