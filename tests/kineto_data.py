"""The Kineto fixtures in ../shared (real torch.profiler traces with HTA's tables as the oracle), and small
traces written by the tests themselves."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pandas as pd
from conftest import SHARED_NSYS, need

SHARED_KINETO = SHARED_NSYS.parent / "kineto"
TRACES = {
    "alexnet": "benchmark_result_2869224_1695835535_trace.json.gz",
    "nccl": "nccl_data.json.gz",
    "diff-control": "control.json.gz",
    "diff-test": "test.json.gz",
}


def trace_path(fixture: str) -> Path:
    path = SHARED_KINETO / fixture / TRACES[fixture]
    need(path)
    return path


def expected(fixture: str, name: str) -> pd.DataFrame:
    return pd.read_csv(SHARED_KINETO / fixture / "expected" / f"{name}.csv")


def raw_events(fixture: str) -> list[dict[str, Any]]:
    """The trace's events as plain json parses them (floats as float)."""
    with gzip.open(trace_path(fixture), "rt") as f:
        return json.load(f)["traceEvents"]


def write_trace(path: Path, events: list[dict[str, Any]], **top: Any) -> Path:
    """A Kineto-style trace file (gzipped when the name ends in .gz)."""
    text = json.dumps({"schemaVersion": 1, **top, "traceEvents": events})
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def cut_after_step(fixture: str, step: int, path: Path, categories: tuple[str, ...] = GPU_CATEGORIES) -> Path:
    """The fixture with its events of `categories` (by default its GPU events: kernels, copies, sets) that
    start after ProfilerStep#`step` ends dropped, as a trace loses them when CUPTI's buffers are lost."""
    events = raw_events(fixture)
    step_ = next(
        e for e in events if e.get("cat") == "user_annotation" and e.get("name") == f"ProfilerStep#{step}"
    )
    end = step_["ts"] + step_["dur"]
    kept = [e for e in events if not (e.get("cat") in categories and e.get("ts", 0) > end)]
    return write_trace(path, kept)
