"""Tables of runs for people: the benchmark-table shape (size, d_model, …, forward/backward/optimizer)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.records import RunResult, phases_for

if TYPE_CHECKING:
    import pandas as pd


def results_table(results: list[RunResult]) -> pd.DataFrame:
    """One row per run: model shape, then per phase mean and std (ns); OOM rows keep NaN timings."""
    import pandas as pd

    rows = []
    for r in results:
        m = r.model
        row: dict[str, object] = {
            "size": r.config.model,
            "precision": r.config.precision,
            "compile": r.config.compile,
            "batch": r.config.batch_size,
            "d_model": m.d_model if m else None,
            "d_ff": m.d_ff if m else None,
            "num_layers": m.num_layers if m else None,
            "num_heads": m.num_heads if m else None,
        }
        stats = {s.phase: s for s in r.phase_stats()}
        for phase in phases_for(r.config.mode, r.config.world_size):
            s = stats.get(phase)
            row[f"{phase} mean (ns)"] = s.mean_ns if s and r.status == "ok" else float("nan")
            row[f"{phase} std (ns)"] = s.std_ns if s and r.status == "ok" else float("nan")
        row["tokens/s"] = r.tokens_per_s if r.status == "ok" else float("nan")
        row["status"] = r.status.upper() if r.status != "ok" else "ok"
        rows.append(row)
    df = pd.DataFrame(rows)
    if not df.empty and (df["compile"] == False).all():  # noqa: E712 - pandas elementwise
        df = df.drop(columns=["compile"])
    if not df.empty and df["batch"].nunique() == 1:  # shown only where it varies (a batch-size sweep)
        df = df.drop(columns=["batch"])
    # on a narrow terminal: the phase means and throughput first, the model's shape last
    means = [c for c in df.columns if c.endswith("mean (ns)")]
    df.attrs["priority"] = ["size", "batch", *means, "tokens/s", "status", "precision", "compile"]
    return df


def throughput_table(result: RunResult) -> pd.DataFrame:
    """Mode-specific figures of one run: tokens/s, FLOPs, MFU, memory; generate adds TTFT and per-token."""
    import pandas as pd

    rows: list[tuple[str, object]] = [
        ("parameters", result.model.params if result.model else None),
        ("tokens/s", result.tokens_per_s),
    ]
    if result.config.mode == "generate":
        rows += [
            ("time to first token (ns)", result.extra.get("ttft_ns")),
            ("per-token latency (ns)", result.extra.get("per_token_ns")),
            ("decode tokens/s", result.extra.get("decode_tokens_per_s")),
        ]
    rows += [
        ("FLOPs per step", result.flops_per_step),
        ("achieved TFLOP/s", result.achieved_flops / 1e12 if result.achieved_flops else None),
        ("MFU (%)", result.mfu * 100 if result.mfu else None),
        ("peak memory (MiB)", result.peak_memory_bytes / 2**20 if result.peak_memory_bytes else None),
    ]
    return pd.DataFrame(
        {"metric": [r[0] for r in rows], "value": pd.Series([r[1] for r in rows], dtype=object)}
    )


def energy_rows(records: list[dict[str, object]]) -> pd.DataFrame:
    """The energy table a run keeps (analysis.energy.ENERGY_COLUMNS as records) for people."""
    import pandas as pd

    df = pd.DataFrame.from_records(records)
    cols = {
        "scope": "scope", "device": "device", "method": "method", "joules": "energy (J)",
        "avg_w": "avg power (W)", "peak_w": "peak power (W)", "samples": "samples",
        "flops_per_j": "FLOPs/J", "tokens_per_j": "tokens/J",
    }  # fmt: skip
    return df.reindex(columns=list(cols)).rename(columns=cols)
