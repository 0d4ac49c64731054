"""Picking and labelling runs for the panels: one row per configuration, short labels, model order."""

from __future__ import annotations

import re

import pandas as pd

from analysis.dashboard.style import setting_label
from workloads.names import CUDA_GRAPH_DECODE, PROGRAM_MODE

# a configuration: what its times depend on (runs of one batch size are no result of another; generate's
# decode time and output tokens/s, of the tokens it decodes)
CONFIG_KEYS = [
    "model", "mode", "precision", "compile", "device",
    "batch_size", "context_length", "new_tokens", "attention",
]  # fmt: skip
# an optional column of the runs, filled by the caller: what slowed the run's steps beyond its phases, as
# its options say it ("--nvtx-detail": synchronised block timers, "--memory", "--plant CAUSE"; "" for
# nothing): no clean time of its configuration while a run without them is stored
ALTERED = "altered"
# the parts of a configuration named in its setting where the runs differ in them, as they are named there
SHAPES = (
    ("batch_size", "batch {}"),
    ("context_length", "context {}"),
    ("new_tokens", "new tokens {}"),
    ("attention", "{} attention"),
)
GRAPHS = (
    "+cuda-graphs"  # a generate run's setting where it decoded by CUDA-graph replay (`run --cuda-graphs`)
)


def graph_decode(runs: pd.DataFrame) -> list[bool]:
    """Per run, whether it decoded by CUDA-graph replay: another configuration than the eager decode of its
    model and precision, compared beside it (a run that measured no step has no decode path: eager)."""
    if "decode_path" not in runs:
        return [False] * len(runs)
    return [p == CUDA_GRAPH_DECODE for p in runs["decode_path"]]


def programs_only(runs: pd.DataFrame) -> bool:
    """Whether `runs` holds runs, all of them programs' (`profile -- CMD`), which time no phase."""
    return bool(len(runs)) and "mode" in runs and bool((runs["mode"] == PROGRAM_MODE).all())


def with_labels(runs: pd.DataFrame) -> pd.DataFrame:
    """Add `setting` (fp32, bf16+compile, …) and `label` (model · setting · short id) columns.

    The setting names the device and the mode (train, forward, generate) where the runs hold more than one,
    and the batch size, context length, new tokens and attention where a model's runs hold more than one: two
    configurations of a model never share a setting.
    """
    out = runs.copy()
    out["setting"] = [
        setting_label(p, bool(c)) + (GRAPHS if g else "")
        for p, c, g in zip(out["precision"], out["compile"], graph_decode(out), strict=True)
    ]
    # named where a model's runs of one mode and device hold several (each model and mode has its defaults)
    within = [k for k in ("model", "mode", "device") if k in out]
    for key, words in reversed(SHAPES):
        if key in out and within and out.groupby(within)[key].nunique(dropna=False).max() > 1:
            named = zip(out[key], out["setting"], strict=True)
            out["setting"] = [f"{words.format(_shown(v))} {s}" for v, s in named]
    for key in ("device", "mode"):
        if key in out and out[key].nunique() > 1:
            out["setting"] = out[key].astype(str) + " " + out["setting"]
    degraded = out["status"] == "degraded" if "status" in out else pd.Series(False, index=out.index)
    out["label"] = [
        f"{m} · {s} · {short_id(r)}" + (" (degraded)" if d else "")
        for m, s, r, d in zip(out["model"], out["setting"], out["run_id"], degraded, strict=True)
    ]
    return out


def _shown(value: object) -> str:
    """A configuration's value as its setting names it: a whole number without `.0`, none as `default`."""
    if value is None or pd.isna(value):
        return "default"
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def profiler_label(run: dict) -> str:
    """`nsys light` for a run made under nsys in light mode; "" for a run without a profiler."""
    profiler, mode = run.get("profiler"), run.get("nsys_mode")
    if not isinstance(profiler, str) or profiler in ("", "none"):
        return ""
    return f"{profiler} {mode}" if isinstance(mode, str) and mode else profiler


def short_id(run_id: str) -> str:
    """The tail of a run id (time and random suffix of `tiny-20260101-120000-ab12`)."""
    return str(run_id)[-11:]


def model_order(runs: pd.DataFrame) -> list[str]:
    """Models smallest first (by parameters, then width), names as the tie-break."""
    cols = [c for c in ("params", "d_model") if c in runs]
    keyed = runs.assign(_p=runs[cols[0]] if cols else 0).sort_values(["_p", "model"], na_position="last")
    return list(dict.fromkeys(keyed["model"]))


def setting_order(settings: pd.Series) -> list[str]:
    """fp32 before bf16 before fp16, each without compile before with."""
    rank = {"fp32": 0, "tf32": 1, "bf16": 2, "fp16": 3}

    def key(s: str) -> tuple[int, list[str | int]]:
        graphs = s.endswith(GRAPHS)
        base = s.removesuffix(GRAPHS).split()[-1].removesuffix("+compile")
        # numbers (batch 2 before batch 16) in their order
        natural = [int(p) if p.isdecimal() else p for p in re.split(r"(\d+)", s)]
        return (rank.get(base, 9) * 3 + s.removesuffix(GRAPHS).endswith("+compile") + 2 * graphs, natural)

    return sorted(dict.fromkeys(settings), key=key)


def latest_per_config(runs: pd.DataFrame) -> pd.DataFrame:
    """The newest run of each configuration, preferring runs that were not stopped by their user (one
    interrupted is no result of the configuration, as one out of memory is), then runs without a profiler
    and not ALTERED (their times are clean)."""
    if runs.empty:
        return runs
    keys = [*(k for k in CONFIG_KEYS if k in runs), "_graphs"]
    altered = runs[ALTERED].fillna("").map(bool) if ALTERED in runs else False
    ranked = runs.assign(
        _finished=(runs.get("status", "ok") != "interrupted").astype(int),
        _clean=((runs.get("profiler", "none") == "none") & ~altered).astype(int),
        _order=range(len(runs)),
        _graphs=graph_decode(runs),
    )
    ranked = ranked.sort_values(["_finished", "_clean", "_order"])
    return (
        ranked.groupby(keys, sort=False, dropna=False)
        .tail(1)
        .sort_values("_order")
        .drop(columns=["_finished", "_clean", "_order", "_graphs"])
    )


def block_runs(runs: pd.DataFrame, blocks: pd.DataFrame) -> pd.DataFrame:
    """The runs the block panels (blocks, roofline) draw, by one rule: per configuration the newest ok run
    with per-block times, one without a profiler preferred (a profiler slows the step); oldest first."""
    if runs.empty or blocks.empty:
        return runs.iloc[:0]
    return latest_per_config(runs[runs["run_id"].isin(set(blocks["run_id"])) & (runs["status"] == "ok")])
