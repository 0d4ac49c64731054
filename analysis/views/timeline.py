"""What happened during one step: NVTX ranges, kernels and memory copies, for the dashboard's timeline."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.errors import ExportError, OptionsError
from analysis.joins.nvtx_ranges import all_ranges, measured_steps
from analysis.joins.runtime import kernel_rows
from analysis.readers.global_ids import pid_of
from analysis.readers.kineto_build import STEP_RE
from analysis.tables.memops import memory_ops
from analysis.trace.trace import Trace
from workloads.names import ALL_PHASES, STEP

EVENT_COLUMNS = ["kind", "name", "start_ns", "end_ns", "lane", "level", "step"]
GPU_LAG = 10  # kernels launched in a step may run up to this many step-lengths after it ends


def step_index(steps: pd.DataFrame, all_steps: pd.DataFrame) -> pd.Series:
    """A step's number: its NVTX payload (the harness's step index), else its position among all steps."""
    position = pd.Series(np.arange(len(all_steps)), index=all_steps["range_id"])
    by_position = steps["range_id"].map(position)
    if steps["payload"].notna().all():
        return steps["payload"].astype(np.int64)
    return by_position.astype(np.int64)


def step_ranges(ranges: pd.DataFrame) -> pd.DataFrame:
    """The step ranges among `ranges` (rows with name and payload): the harness's `step`, else a
    torch.profiler trace's `ProfilerStep#N` (its payload N, so `step_index` numbers it N). The harness's own
    torch.profiler trace has both, its `step` ranges without a payload (record_function takes none): there
    ProfilerStep#N numbers them, N being the harness's step index, where their places would count from 0."""
    steps = ranges[ranges["name"] == STEP]
    profiler = ranges[ranges["name"].astype(str).str.fullmatch(STEP_RE.pattern)]
    if steps.empty or (steps["payload"].isna().all() and len(profiler)):
        steps = profiler
    return steps.reset_index(drop=True)


def pick_step(trace: Trace, step: int | None = None) -> pd.Series:
    """The step range to show (the harness's `step`, or a torch.profiler trace's ProfilerStep#N, as
    `step_ranges` takes them): number `step`, or the measured step of median duration."""
    trace.require("nvtx", "NVTX data")
    all_steps = step_ranges(all_ranges(trace))
    if all_steps.empty:
        raise ExportError(
            f"no '{STEP}' NVTX ranges (nor ProfilerStep#N) in {trace.path}: it was not recorded by the "
            "harness or torch.profiler"
        )
    numbers = step_index(all_steps, all_steps)
    if step is not None:
        hit = all_steps[numbers.to_numpy() == step]
        if hit.empty:
            raise ExportError(f"no step {step} in {trace.path} (steps {numbers.min()}..{numbers.max()})")
        return hit.iloc[0].copy().rename(int(step))
    measured = measured_steps(all_steps.assign(_n=numbers)) if len(all_steps) else all_steps
    measured = measured if len(measured) else all_steps.assign(_n=numbers)
    by_length = measured.sort_values("duration_ns", kind="stable")
    chosen = by_length.iloc[(len(by_length) - 1) // 2]
    return chosen.rename(int(numbers[all_steps["range_id"] == chosen["range_id"]].iloc[0]))


def step_events(trace: Trace, step: int | None = None, max_kernels: int = 20000) -> pd.DataFrame:
    """Rows (EVENT_COLUMNS) of one step: kind "nvtx" | "kernel" | "memcpy", name, start/end (ns), lane
    (thread name and "main thread" or its tid for NVTX; "stream N" for GPU work), NVTX nesting level, step.

    Kernels are those whose launch call started in the step (or, without runtime data, that started in
    it); the first `max_kernels` are kept and `attrs["notes"]` says when more were cut.
    """
    chosen = pick_step(trace, step)
    number = int(chosen.name)
    lo, hi = int(chosen["start_ns"]), int(chosen["end_ns"])
    pid = int(chosen["pid"])
    ranges = all_ranges(trace)
    inside = ranges[(ranges["pid"] == pid) & (ranges["end_ns"] >= lo) & (ranges["start_ns"] <= hi)]
    # ranges around the whole step (`measured`, the user's own) would stretch the axis over every step
    inside = inside[~((inside["start_ns"] < lo) & (inside["end_ns"] >= hi))]
    level = inside["level"] - inside.groupby("global_tid")["level"].transform("min")
    threads = trace.thread_names()
    lanes = [
        thread_lane(threads.get(int(g)), int(t), pid)
        for g, t in zip(inside["global_tid"], inside["tid"], strict=True)
    ]
    frames = [
        pd.DataFrame(
            {
                "kind": "nvtx",
                "name": inside["name"].to_numpy(dtype=object),
                "start_ns": inside["start_ns"].to_numpy(),
                "end_ns": inside["end_ns"].to_numpy(),
                "lane": lanes,
                "level": level.to_numpy(),
            }
        )
    ]
    notes: list[str] = []
    calls = None
    if trace.has("runtime"):
        calls = trace.frame("runtime", ["start", "end", "correlation_id", "global_tid"])
        calls = calls[(calls["start"] >= lo) & (calls["start"] <= hi)]
        calls = calls.loc[pid_of(calls["global_tid"]) == pid, "correlation_id"]
    if trace.has("kernels"):
        kernels = _step_kernels(trace, lo, hi, pid, calls)
        if len(kernels) > max_kernels:
            notes.append(f"step {number}: showing the first {max_kernels:,} of {len(kernels):,} kernels")
            kernels = kernels.iloc[:max_kernels]
        frames.append(kernels)
        frames.append(_step_copies(trace, lo, hi, calls))
    out = (
        pd.concat([f for f in frames if len(f)], ignore_index=True)
        if any(len(f) for f in frames)
        else frames[0]
    )
    out["step"] = number
    out = out.sort_values(["start_ns", "kind"], kind="stable").reset_index(drop=True)[EVENT_COLUMNS]
    out.attrs["notes"] = [*trace.notes, *notes]
    return out


def thread_lane(name: str | None, tid: int, pid: int) -> str:
    """`python (main thread)`, `pt_autograd_0 (thread 4242)`: the thread's name and which thread it is."""
    which = "main thread" if tid == pid else f"thread {tid}"
    return f"{name} ({which})" if name else which


def _step_kernels(trace: Trace, lo: int, hi: int, pid: int, calls: pd.Series | None) -> pd.DataFrame:
    fields = ("name_id", "start", "end", "stream_id", "correlation_id", "global_pid")
    kern = kernel_rows(trace, fields)
    kern = kern[(kern["start"] >= lo) & (kern["start"] <= hi + GPU_LAG * (hi - lo))]
    kern = kern[pid_of(kern["global_pid"]) == pid]
    launched = kern["correlation_id"].isin(calls) if calls is not None else kern["start"] <= hi
    return _kernel_events(trace, kern[launched])


def _kernel_events(trace: Trace, kern: pd.DataFrame) -> pd.DataFrame:
    """Kernels (name_id, start, end, stream_id) as timeline events, one lane per stream."""
    names = trace.strings(kern["name_id"].unique())
    return pd.DataFrame(
        {
            "kind": "kernel",
            "name": kern["name_id"].map(names).to_numpy(dtype=object),
            "start_ns": kern["start"].to_numpy(),
            "end_ns": kern["end"].to_numpy(),
            "lane": [f"stream {s}" for s in kern["stream_id"]],
            "level": 0,
        }
    )


def _step_copies(trace: Trace, lo: int, hi: int, calls: pd.Series | None) -> pd.DataFrame:
    """Memory operations issued by calls in the step (or, without runtime data, started in it)."""
    if not (trace.has("memcpy") or trace.has("memset")):
        return pd.DataFrame(columns=EVENT_COLUMNS[:-1])
    if calls is None:
        ops = memory_ops(trace, window=(lo, hi))
    else:
        ops = memory_ops(trace, window=(lo, hi + GPU_LAG * (hi - lo)))
        ops = ops[ops["correlation_id"].isin(calls)]
    return pd.DataFrame(
        {
            "kind": "memcpy",
            "name": ops["Operation"].to_numpy(dtype=object),
            "start_ns": ops["start"].to_numpy(),
            "end_ns": ops["end"].to_numpy(),
            "lane": [f"stream {s}" for s in ops["stream_id"]],
            "level": 0,
        }
    )


# --- a window of the capture, for exports without the harness's `step` ranges ------------------------------

WINDOW_NS = 1_000_000_000  # the busiest second by default


def _activity(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start and end (ns) of what the capture shows, and how much each weighs: kernels by their GPU time;
    without kernels, NVTX ranges by their time."""
    if trace.has("kernels"):
        k = kernel_rows(trace, ("start", "end"))
        start, end = k["start"].to_numpy(np.int64), k["end"].to_numpy(np.int64)
    else:
        trace.require("nvtx", "NVTX data or kernels")
        r = all_ranges(trace, columns=["start_ns", "end_ns"])
        start, end = r["start_ns"].to_numpy(np.int64), r["end_ns"].to_numpy(np.int64)
    order = np.argsort(start, kind="stable")
    return start[order], end[order], (end - start)[order]


# every frame a timeline draws (analysis.views.chrome_trace), for the span its events cover
TIMED_FRAMES = ("kernels", "nvtx", "runtime", "memcpy", "memset", "syncs", "osrt", "cpu_ops")


def time_zero(trace: Trace) -> int:
    """The zero of every time said to people (`health`, `timeline`, the dashboard) and of --start/--end:
    nsys's own, its session's start, where Nsight Systems' timeline puts 0 (an export's times are said as
    they are); a Kineto trace's first event (its times are Unix time)."""
    if trace.format == "nsys-sqlite":
        return 0
    frames = [f for f in TIMED_FRAMES if f != "osrt" and trace.has(f)]
    return min((int(trace.frame(f, ["start"])["start"].min()) for f in frames), default=0)


def zero_words(trace: Trace) -> str:
    """`time_zero` in words: what a time said to people counts from."""
    return "the session's start" if trace.format == "nsys-sqlite" else "the trace's first event"


def capture_span(trace: Trace, frames: tuple[str, ...] = ("kernels", "nvtx", "runtime")) -> tuple[int, int]:
    """The first and the last instant (ns) of the events of `frames` (by default the kernels, NVTX ranges
    and CUDA calls); (0, 0) where there are none."""
    firsts, lasts = [], []
    for frame in frames:
        if trace.has(frame):
            times = trace.frame(frame, ["start", "end"])
            if len(times):
                firsts.append(int(times["start"].min()))
                lasts.append(int(times["end"].max()))
    return (min(firsts), max(lasts)) if firsts else (0, 0)


def span_words(trace: Trace) -> str:
    """The span of every event a timeline draws, in seconds from `time_zero` (the origin of --start/--end):
    `5.7..21 s`."""
    origin = time_zero(trace)
    first, last = capture_span(trace, TIMED_FRAMES)
    return f"{(first - origin) / 1e9:g}..{(last - origin) / 1e9:g} s"


def busiest_window(trace: Trace, width: int = WINDOW_NS) -> tuple[int, int]:
    """The `width` ns of the capture holding the most activity (kernel time, else NVTX range time), starting
    at an event's start; the whole capture when it is shorter."""
    start, end, weight = _activity(trace)
    if not len(start):
        raise ExportError(f"no kernels or NVTX ranges in {trace.path} to draw")
    if end.max() - start[0] <= width:
        return int(start[0]), int(end.max())
    total = np.concatenate([[0], np.cumsum(np.minimum(weight, width))])
    last = np.searchsorted(start, start + width, side="left")  # events starting inside [s, s + width)
    best = int(np.argmax(total[last] - total[np.arange(len(start))]))
    return int(start[best]), int(start[best]) + width


def window_events(trace: Trace, lo: int, hi: int, max_kernels: int = 20000) -> pd.DataFrame:
    """Rows (EVENT_COLUMNS, step -1) of the window [lo, hi] ns of the capture, every process: NVTX ranges
    overlapping it (clipped to it), kernels and memory operations starting in it (the first `max_kernels`)."""
    frames = []
    notes: list[str] = []
    if trace.has("nvtx"):
        ranges = all_ranges(trace)
        inside = ranges[(ranges["end_ns"] >= lo) & (ranges["start_ns"] <= hi)]
        level = inside["level"] - inside.groupby("global_tid")["level"].transform("min")
        threads = trace.thread_names()
        lanes = [
            thread_lane(threads.get(int(g)), int(t), int(p))
            for g, t, p in zip(inside["global_tid"], inside["tid"], inside["pid"], strict=True)
        ]
        frames.append(
            pd.DataFrame(
                {
                    "kind": "nvtx",
                    "name": inside["name"].to_numpy(dtype=object),
                    "start_ns": inside["start_ns"].clip(lower=lo).to_numpy(),
                    "end_ns": inside["end_ns"].clip(upper=hi).to_numpy(),
                    "lane": lanes,
                    "level": level.to_numpy(),
                }
            )
        )
    if trace.has("kernels"):
        fields = ("name_id", "start", "end", "stream_id")
        kern = kernel_rows(trace, fields)
        kern = kern[(kern["start"] >= lo) & (kern["start"] <= hi)].sort_values("start", kind="stable")
        if len(kern) > max_kernels:
            notes.append(f"showing the first {max_kernels:,} of {len(kern):,} kernels in the window")
            kern = kern.iloc[:max_kernels]
        frames.append(_kernel_events(trace, kern))
        frames.append(_step_copies(trace, lo, hi, None))
    kept = [f for f in frames if len(f)]
    out = pd.concat(kept, ignore_index=True) if kept else pd.DataFrame(columns=EVENT_COLUMNS[:-1])
    out["step"] = -1
    out = out.sort_values(["start_ns", "kind"], kind="stable").reset_index(drop=True)[EVENT_COLUMNS]
    out.attrs["notes"] = [*trace.notes, *notes]
    return out


OPEN = 2**62  # ns: the end of a window given only its other end (no event lies past it)
WINDOW_MAX_S = 9.2e9  # s: the most --start/--end may be either way (its nanoseconds fit in int64)


def check_window(
    step: int | None = None, phase: str | None = None, start: float | None = None, end: float | None = None
) -> None:
    """The ways to cut a timeline checked together, before any file is opened: a usage error (exit 2)."""
    for flag, edge in (("--start", start), ("--end", end)):
        if edge is not None and not -WINDOW_MAX_S <= edge <= WINDOW_MAX_S:  # nan and inf too
            raise OptionsError(
                f"{flag} must be a number of seconds, at most {WINDOW_MAX_S:g} either way; got {edge:g}"
            )
    if (step is not None or phase is not None) and (start is not None or end is not None):
        raise OptionsError("--step/--phase and --start/--end exclude each other: pick one way to cut")
    if phase is not None and step is None:
        raise OptionsError(f"--phase {phase} needs --step N: a phase runs once per step")
    if start is not None and end is not None and end <= start:
        raise OptionsError(f"--end ({end} s) must be after --start ({start} s)")


def window_of(
    trace: Trace,
    *,
    step: int | None = None,
    phase: str | None = None,
    start: float | None = None,
    end: float | None = None,
) -> tuple[int, int] | None:
    """The interval (ns) a timeline is cut to: a harness step (`step`, its number as `harness` shows it),
    one phase of it, or `start`..`end` (seconds from `time_zero`, as `health` says times); None for the
    whole trace. A step or phase whose range was never closed ends where the next one starts, as a note on
    the trace says; one that nothing follows is refused (OptionsError): where it ends is not known."""
    check_window(step, phase, start, end)
    if step is None:
        if start is None and end is None:
            return None
        t0 = time_zero(trace)
        lo = t0 + round(start * 1e9) if start is not None else -OPEN
        return lo, t0 + round(end * 1e9) if end is not None else OPEN
    trace.require("nvtx", "NVTX data (the harness's step ranges)")
    nvtx = trace.frame("nvtx", ["range_id", "start", "end", "global_tid", "payload", "name"])
    steps = step_ranges(nvtx)
    if steps.empty:
        raise ExportError(f"no step ranges (the harness's `{STEP}`, or ProfilerStep#N) in {trace.path}")
    numbers = step_index(steps, steps).to_numpy()
    chosen = steps[numbers == step]
    # the harness's phase ranges carry their step's number: a step whose `step` range was lost is known
    # from them, and a phase of the next step that lies inside this one's span is not this one's
    phases = nvtx["name"].isin(ALL_PHASES).to_numpy()
    payload = nvtx["payload"].astype("Float64")  # missing where a range has none
    own = nvtx[phases & (payload == step).fillna(False).to_numpy(dtype=bool)]
    if chosen.empty and own.empty:
        raise ExportError(f"no step {step} in {trace.path} (steps {numbers.min()}..{numbers.max()})")
    open_ends = _open_from(trace, nvtx)
    if len(chosen):
        ends = _closed_ends(trace, chosen, steps, open_ends, f"step {step}'s range", "step")
        lo, hi = int(chosen["start"].min()), int(ends.max())
    else:
        lo, hi = int(own["start"].min()), int(own["end"].max())
    if phase is None:
        return lo, hi
    inside = nvtx[(nvtx["name"] == phase) & (nvtx["start"] >= lo) & (nvtx["start"] <= hi)]
    inside = inside[(inside["end"] <= hi).to_numpy() | _lost(inside, open_ends[0])]
    if phase in ALL_PHASES:
        theirs = payload[inside.index]
        inside = inside[(theirs.isna() | (theirs == step)).fillna(True).to_numpy(dtype=bool)]
    if inside.empty:
        raise ExportError(
            f"no '{phase}' range in step {step} of {trace.path}{_ranges_in(nvtx, lo, hi, steps, phase)}"
        )
    followers = nvtx[phases | nvtx["range_id"].isin(steps["range_id"]).to_numpy()]
    ends = _closed_ends(
        trace, inside, followers, open_ends, f"step {step}'s {phase} range", "range", bound=hi
    )
    return int(inside["start"].min()), int(np.minimum(ends, hi).max())


SHOWN_NAMES = 8  # range names a refused --phase lists


def _ranges_in(nvtx: pd.DataFrame, lo: int, hi: int, steps: pd.DataFrame, phase: str) -> str:
    """The names of the ranges that start in `lo`..`hi` (a step), but the step ranges, as `--phase` takes
    them, those holding `phase` first: a phase asked for by another name (`backward` for Kineto's
    `## backward ##`) is then found."""
    names = nvtx["name"][
        (nvtx["start"] >= lo) & (nvtx["start"] <= hi) & ~nvtx["range_id"].isin(steps["range_id"])
    ]
    asked = phase.casefold()
    shown = sorted(set(names.dropna().astype(str)), key=lambda n: (asked not in n.casefold(), n))
    if not shown:
        return ": the step holds no other range"
    more = f", and {len(shown) - SHOWN_NAMES:,} more" if len(shown) > SHOWN_NAMES else ""
    return ": its ranges are " + ", ".join(repr(n) for n in shown[:SHOWN_NAMES]) + more


def _open_from(trace: Trace, nvtx: pd.DataFrame) -> tuple[int | None, bool]:
    """From when a range's end is the one given a range never closed, as the step checks of `health` take
    it: the export's last NVTX time (the reader's end for a range with none), or the capture's end where it
    comes first (nsys's end for a range still open when the capture stopped); None where no range of the
    capture is open (nsys counts them; a Kineto trace has none). And whether every range ending there is
    one never closed: a range closed at the export's last NVTX time ends there too."""
    n = int(trace.capture_facts().get("open_ranges", 0))
    if not n or nvtx.empty:
        return None, False
    last = int(max(nvtx["start"].max(), nvtx["end"].max()))
    capture_end = trace.meta.get("capture_end_ns")
    open_from = min(last, capture_end) if isinstance(capture_end, int) else last
    return open_from, int((nvtx["end"] >= open_from).sum()) <= n


def _lost(ranges: pd.DataFrame, open_from: int | None) -> np.ndarray:
    """Per range, whether it may never have been closed (`_open_from`). One whose end comes before its
    start (nsys's -1) is not here: the reader leaves it out; a harness step is then known by its phases."""
    if open_from is None:
        return np.zeros(len(ranges), dtype=bool)
    return ranges["end"].to_numpy(np.int64) >= open_from


def _closed_ends(
    trace: Trace,
    ranges: pd.DataFrame,
    followers: pd.DataFrame,
    open_ends: tuple[int | None, bool],
    what: str,
    kind: str,
    bound: int | None = None,
) -> np.ndarray:
    """The ends of `ranges`, each that may never have been closed (`_lost`) moved to the start of the first
    of `followers` that starts after it in its process, where one does (its end cannot be past it), and said
    in the trace's notes. Where none does: ended at `bound` if given, else refused (OptionsError) when it
    surely was never closed (`_open_from`), else kept."""
    open_from, certain = open_ends
    ends = ranges["end"].to_numpy(np.int64).copy()
    lost = _lost(ranges, open_from)
    if not lost.any():
        return ends
    zero, origin = time_zero(trace), zero_words(trace)
    f_start = followers["start"].to_numpy(np.int64)
    f_pid = pid_of(followers["global_tid"].to_numpy())
    starts, pids = ranges["start"].to_numpy(np.int64), pid_of(ranges["global_tid"].to_numpy())
    for i in np.flatnonzero(lost):
        later = f_start[(f_pid == pids[i]) & (f_start > starts[i])]
        if len(later):
            ends[i] = int(later.min())
            trace.note(f"{what} was never closed (its end was lost): drawn up to where the next "
                       f"{kind} starts, {(ends[i] - zero) / 1e9:,.3f} s from {origin}")  # fmt: skip
        elif bound is not None:
            ends[i] = bound
        elif certain:
            at = f"{(starts[i] - zero) / 1e9:.9f}".rstrip("0").rstrip(".")
            raise OptionsError(
                f"{what} was never closed (its end was lost) and no {kind} starts after it: where it "
                f"ends is not known; --start {at} draws from its start ({origin} is 0 s)"
            )
    return ends
