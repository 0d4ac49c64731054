"""A CUDA memory snapshot (torch.cuda.memory._dump_snapshot) as a timeline: allocated bytes after each
allocator event, attributed to the phase it happened in.

The snapshot is a dict: `segments` (the allocator's state when it was taken: per segment its `device`,
`total_size`, `allocated_size`, `blocks`) and `device_traces` (per device, the recorded events in order:
`action` alloc | free_requested | free_completed | segment_alloc | segment_free | segment_map |
segment_unmap | snapshot | oom, with `addr`, `size`, `stream`, `frames` and `time_us`, microseconds since
the Unix epoch). Allocated memory goes up at `alloc` and down at `free_completed`, as in PyTorch's memory
viz ("Active Memory Timeline"); memory allocated before recording began is the allocated total at the
snapshot minus what the trace added, so the timeline starts at its true level.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.errors import AnalysisError

ALLOC, FREE = "alloc", "free_completed"
TIMELINE_COLUMNS = [
    "device", "event", "time_ns", "action", "size", "delta_bytes", "allocated_bytes", "step", "phase",
]  # fmt: skip


def read_snapshot(path: str | Path) -> dict[str, Any]:
    """Load a snapshot pickle (the user's own file: pickle runs what it holds, like torch.load)."""
    try:
        with open(path, "rb") as f:
            data = pickle.load(f)
    except FileNotFoundError:
        raise AnalysisError(f"no memory snapshot at {path}") from None
    except (OSError, pickle.UnpicklingError, EOFError) as e:
        raise AnalysisError(f"cannot read memory snapshot {path}: {e}") from None
    if not isinstance(data, dict) or "device_traces" not in data:
        raise AnalysisError(f"{path} is not a CUDA memory snapshot (no device_traces)")
    return data


def memory_timeline(snapshot: dict[str, Any], phases: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per alloc / free_completed event of every device: TIMELINE_COLUMNS.

    `phases`: step, phase, start_ns, end_ns (Unix-time ns; harness.execution.memory writes them beside the
    snapshot);
    an event outside every phase gets phase None.
    """
    frames = []
    for device, trace in enumerate(snapshot.get("device_traces") or []):
        events = [e for e in trace if e.get("action") in (ALLOC, FREE)]
        if not events:
            continue
        df = pd.DataFrame(
            {
                "device": device,
                "event": range(len(events)),
                "time_ns": [e["time_us"] * 1000 if e.get("time_us") is not None else None for e in events],
                "action": [e["action"] for e in events],
                "size": [int(e.get("size", 0)) for e in events],
            }
        )
        df["delta_bytes"] = df["size"].where(df["action"] == ALLOC, -df["size"])
        at_end = sum(
            int(s.get("allocated_size", 0))
            for s in snapshot.get("segments") or []
            if s.get("device", 0) == device
        )
        df["allocated_bytes"] = at_end - int(df["delta_bytes"].sum()) + df["delta_bytes"].cumsum()
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    out = pd.concat(frames, ignore_index=True)
    out["time_ns"] = out["time_ns"].astype("Float64")
    out["step"], out["phase"] = pd.NA, None
    if phases is not None and len(phases) and out["time_ns"].notna().any():
        _attribute(out, phases)
    return out[TIMELINE_COLUMNS]


def _attribute(out: pd.DataFrame, phases: pd.DataFrame) -> None:
    """The step and phase whose [start_ns, end_ns] holds each event's time."""
    t = out["time_ns"]
    for row in phases.itertuples(index=False):
        inside = (t >= row.start_ns) & (t <= row.end_ns)
        inside = inside.fillna(False).astype(bool)
        out.loc[inside, "phase"] = row.phase
        out.loc[inside, "step"] = row.step


def phase_peaks(timeline: pd.DataFrame) -> pd.DataFrame:
    """Per phase: the highest allocated bytes seen in it and the net change over it (all its steps)."""
    t = timeline[timeline["phase"].notna()]
    if t.empty:
        return pd.DataFrame(columns=["phase", "events", "peak_bytes", "net_bytes"])
    g = t.groupby("phase", sort=False)
    return pd.DataFrame(
        {
            "events": g.size(),
            "peak_bytes": g["allocated_bytes"].max(),
            "net_bytes": g["delta_bytes"].sum(),
        }
    ).reset_index()
