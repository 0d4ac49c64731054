"""Devices: pick one, synchronise it before reading a clock, read its peak memory and name."""

from __future__ import annotations

import resource
import sys
from typing import Any

from harness.errors import UsageError

DEVICES = ("auto", "cpu", "cuda", "mps")


def resolve_device(requested: str) -> Any:
    """'auto' picks cuda, then mps, then cpu. Asking for a device that is not there is a usage error."""
    import torch

    if requested not in DEVICES:
        raise UsageError(f"unknown device {requested!r}; choose one of {', '.join(DEVICES)}")
    if requested == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        why = "this torch is a CPU build" if torch.version.cuda is None else "no CUDA device is visible"
        raise UsageError(
            f"--device cuda asked for, but CUDA is not available ({why}); use --device cpu or auto"
        )
    if requested == "mps" and not (
        getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()
    ):
        raise UsageError("--device mps asked for, but MPS is not available; use --device cpu or auto")
    return torch.device(requested)


def synchronize(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def device_name(device: Any) -> str:
    import platform

    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return "Apple MPS"
    return platform.processor() or platform.machine() or "cpu"


def reset_peak_memory(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_bytes(device: Any) -> int:
    """Peak allocated device memory on CUDA/MPS; on the CPU, the process's peak resident set size."""
    import torch

    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    if device.type == "mps":
        return int(torch.mps.driver_allocated_memory())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def is_oom(exc: BaseException) -> bool:
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def free_memory(device: Any) -> None:
    import gc

    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
