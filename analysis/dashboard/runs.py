"""Picking and labelling runs for the panels: one row per configuration, short labels, model order."""

from __future__ import annotations

import pandas as pd

from analysis.dashboard.style import setting_label

CONFIG_KEYS = ["model", "precision", "compile", "device"]


def with_labels(runs: pd.DataFrame) -> pd.DataFrame:
    """Add `setting` (fp32, bf16+compile, …) and `label` (model · setting · short id) columns."""
    out = runs.copy()
    out["setting"] = [
        setting_label(p, bool(c)) for p, c in zip(out["precision"], out["compile"], strict=True)
    ]
    devices = out["device"].nunique() if "device" in out else 1
    if devices > 1:
        out["setting"] = out["device"].astype(str) + " " + out["setting"]
    out["label"] = [
        f"{m} · {s} · {short_id(r)}"
        for m, s, r in zip(out["model"], out["setting"], out["run_id"], strict=True)
    ]
    return out


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

    def key(s: str) -> tuple[int, str]:
        base = s.split()[-1].removesuffix("+compile")
        return (rank.get(base, 9) * 2 + s.endswith("+compile"), s)

    return sorted(dict.fromkeys(settings), key=key)


def latest_per_config(runs: pd.DataFrame) -> pd.DataFrame:
    """The newest run of each configuration, preferring runs without a profiler (their times are clean)."""
    if runs.empty:
        return runs
    keys = [k for k in CONFIG_KEYS if k in runs]
    ranked = runs.assign(_clean=(runs.get("profiler", "none") == "none").astype(int), _order=range(len(runs)))
    ranked = ranked.sort_values(["_clean", "_order"])
    return (
        ranked.groupby(keys, sort=False, dropna=False)
        .tail(1)
        .sort_values("_order")
        .drop(columns=["_clean", "_order"])
    )
