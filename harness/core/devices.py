"""Devices: pick one, synchronise it before reading a clock, read its peak memory and name."""

from __future__ import annotations

import os
import resource
import sys
from typing import Any

from harness.core.errors import UsageError

DEVICES = ("auto", "cpu", "cuda", "mps")
# Test-only: the CPU's name as this says, not as /proc/cpuinfo does. The suite runs once "as another
# machine" with a long stand-in name (.ci/run, README "Tests"), so no test can pass on one CPU's name only.
TEST_CPU_NAME = "HARNESS_TEST_CPU_NAME"


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


BF16_TENSOR_CORES = (8, 0)  # compute capability of the first GPUs with bf16 tensor cores (Ampere)


def emulated_precision_note(device: Any, precisions: list[str], backward: bool = True) -> str | None:
    """Say so when bf16/fp16 on this CPU has no native support: torch then emulates it, many times slower
    (`backward`: the work has a backward pass, where it is slowest); and when bf16 runs on a GPU without
    bf16 tensor cores (before compute capability 8.0: V100, T4), where its GEMMs take no tensor core."""
    import torch

    if device.type == "cuda":
        if "bf16" not in precisions:
            return None
        major, minor = torch.cuda.get_device_capability(device)
        if (major, minor) >= BF16_TENSOR_CORES:
            return None
        return (
            f"bf16 on this GPU (compute capability {major}.{minor}) has no tensor cores (bf16 ones came with "
            "8.0): its matrix products run without them, expect steps slower than with fp16, often slower "
            "than fp32"
        )
    if device.type != "cpu":
        return None

    checks = {
        "bf16": getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None),
        "fp16": getattr(torch.ops.mkldnn, "_is_mkldnn_fp16_supported", None),
    }
    slow = []
    for precision in dict.fromkeys(precisions):
        check = checks.get(precision)
        try:
            if check is not None and not check():
                slow.append(precision)
        except RuntimeError:
            continue
    if not slow:
        return None
    return (
        f"{'/'.join(slow)} on this CPU is emulated (no AVX512-BF16/AMX or FP16 units): expect steps many "
        "times slower than fp32" + (", backward most of all" if backward else "")
    )


def synchronize(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def device_name(device: Any) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return "Apple MPS"
    return cpu_name()


def cpu_name() -> str:
    """The CPU's marketing name (HARNESS_TEST_CPU_NAME in tests that stand in for another machine)."""
    import platform

    stand_in = os.environ.get(TEST_CPU_NAME)
    return stand_in or _cpu_model() or platform.processor() or platform.machine() or "cpu"


def _cpu_model() -> str | None:
    """The CPU's marketing name on Linux (platform.processor() is empty there)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        return None
    return None


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


def peak_reserved_bytes(device: Any) -> int | None:
    """Peak memory the caching allocator held from the driver (CUDA), or the driver's total (MPS). The CPU
    has no caching allocator: None."""
    import torch

    if device.type == "cuda":
        return int(torch.cuda.max_memory_reserved(device))
    if device.type == "mps":
        return int(torch.mps.driver_allocated_memory())
    return None


# What torch's allocators say when an allocation fails: CUDA/MPS ("... out of memory"), the CPU allocator
# ("DefaultCPUAllocator: can't allocate memory" / "not enough memory"), which raises a plain RuntimeError.
OOM_MESSAGES = ("out of memory", "can't allocate memory", "not enough memory")


def is_oom(exc: BaseException) -> bool:
    import torch

    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc).lower() for m in OOM_MESSAGES)


def free_memory(device: Any) -> None:
    import gc

    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def device_memory_bytes(device: Any) -> int | None:
    """All the memory of the device a run is on: a GPU's, or the machine's for the CPU (None: not known,
    or MPS, which shares the machine's with everything else)."""
    try:
        if device.type == "cuda":
            import torch

            return int(torch.cuda.get_device_properties(device).total_memory)
        if device.type == "cpu":
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except Exception:  # a platform without these names, a device that cannot be asked: nothing to warn of
        return None
    return None
