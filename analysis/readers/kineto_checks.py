"""What the Kineto reader (analysis.readers.kineto) does with what it cannot take as it is:
names that are not text or hold lone surrogates, ids that cannot be dict keys, events left out (counted,
with the reason, in the notes every table carries), and whether a trace file was written to its end.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workloads.names import counted

if TYPE_CHECKING:  # a worker reading part of a trace (analysis.readers.kineto_columns) starts without pandas
    import pandas as pd


def clean_name(value: Any) -> tuple[str, bool]:
    """(a name as text, whether it held invalid Unicode): a list or number becomes its JSON-like text, None
    empty; lone surrogates ("\\ud800", which JSON allows and UTF-8 cannot hold) become the escape
    `\\ud800` so the name is kept and can be written to Parquet."""
    if type(value) is not str:
        value = "" if value is None else json.dumps(value, ensure_ascii=False, default=str)
    if value.isascii():
        return value, False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8"), True
    return value, False


def hashable(v: Any) -> Any:
    """A value that can be a dict key whatever the JSON held (a list, an object: their JSON text)."""
    return v if v is None or isinstance(v, int | str | float) else json.dumps(v, default=str)


# which frame's events each category group fills, and what they are called in a note
GROUP_FRAMES = {"kernels": "kernels", "memcpy": "memcpy", "memset": "memset", "syncs": "syncs",
                "runtime": "runtime", "annotation": "nvtx", "gpu_annotation": "nvtx",
                "cpu_ops": "cpu_ops"}  # fmt: skip
GROUP_NAMES = {"kernels": "kernel", "memcpy": "memcpy", "memset": "memset", "syncs": "cuda_sync",
               "runtime": "CUDA runtime", "annotation": "user_annotation",
               "gpu_annotation": "gpu_user_annotation", "cpu_ops": "cpu_op"}  # fmt: skip
UNUSABLE = "no usable ts or dur: missing, not a number, or a negative dur"


def notes_and_hints(
    unusable: dict[str, int], escaped: int, frames: dict[str, pd.DataFrame], hints: dict[str, str]
) -> tuple[list[str], dict[str, str]]:
    """The notes every table of this trace carries (events left out, names escaped), and the hints for
    frames that are empty because all their events were left out."""
    notes = []
    hints = dict(hints)
    dropped = {k: n for k, n in unusable.items() if n}
    if dropped:
        parts = ", ".join(f"{n:,} {GROUP_NAMES[k]}" for k, n in dropped.items())
        notes.append(f"left out {counted(sum(dropped.values()), 'Kineto event')} with {UNUSABLE} ({parts})")
        for k, n in dropped.items():
            frame = GROUP_FRAMES[k]
            if len(frames[frame]) == 0:
                which = (
                    f"its {GROUP_NAMES[k]} event was"
                    if n == 1
                    else f"all {n:,} of its {GROUP_NAMES[k]} events were"
                )
                hints[frame] = f"{which} left out ({UNUSABLE})"
    if escaped:
        notes.append(
            f"{counted(escaped, 'name')} held invalid Unicode (lone surrogates): kept, with \\uXXXX escapes"
        )
    return notes, hints


def is_complete(path: Path) -> bool:
    """Whether a trace file was written to its end: a gzip stream that ends properly, and JSON text that
    ends with its closing bracket (a worker stopped while torch wrote it leaves neither). Reads the file
    once, a MiB at a time, keeping nothing."""
    last = b""
    try:
        with open(path, "rb") as f:
            gzipped = f.read(2) == b"\x1f\x8b"
            f.seek(0)
            unzip = zlib.decompressobj(wbits=47) if gzipped else None
            while chunk := f.read(1 << 20):
                data = unzip.decompress(chunk) if unzip is not None else chunk
                if data.strip():
                    last = data.rstrip()[-1:]
            if unzip is not None and not unzip.eof:
                return False
    except (OSError, zlib.error):
        return False
    return last in (b"}", b"]")
