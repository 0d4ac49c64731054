"""A device's roofs: from the datasheet table (workloads.peak) or measured on the device itself.

Measured: the best of a few timed runs of a large matmul (compute) and a large device-to-device copy
(bandwidth: each byte is read once and written once, so a copy of N bytes moves 2·N). On a GPU the matmul is
in the run's precision (bf16 by default); on a CPU it is fp32 (bf16 there is often emulated) and sizes are
small enough for a laptop. A measured roof is what this device reaches with PyTorch's own kernels, usually
below the datasheet.
"""

from __future__ import annotations

import time
from typing import Any

from analysis.roofline import Roofs
from harness.core.devices import device_name, synchronize

# (matmul side n, copy bytes): n×n×n matmul does 2·n³ FLOPs
GPU_SIZES = (8192, 1 << 30)
CPU_SIZES = (1024, 64 << 20)
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def table_roofs(name: str, precision: str) -> Roofs | None:
    """The datasheet roofs of the GPU called `name` (as torch names it, or a short name like "H100"); None
    when the table knows neither its peak nor its bandwidth."""
    from workloads import peak  # torch, via workloads: kept off the CLI start-up

    flops, bandwidth = peak.peak_flops(name, precision), peak.peak_bandwidth(name)
    if flops is None and bandwidth is None:
        return None
    return Roofs(f"{name}, datasheet, {precision}", flops, bandwidth)


def _best_seconds(fn: Any, device: Any, repeats: int) -> float:
    """The fastest of `repeats` timed calls, after one untimed call (allocation, kernel selection)."""
    fn()
    synchronize(device)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn()
        synchronize(device)
        best = min(best, (time.perf_counter_ns() - t0) / 1e9)
    return best


def measure_roofs(
    device: Any,
    precision: str = "bf16",
    *,
    matmul_n: int | None = None,
    copy_bytes: int | None = None,
    repeats: int = 5,
) -> Roofs:
    """Measure peak FLOP/s (an n×n matmul) and bandwidth (a copy) on a torch `device`.

    Defaults: n = 8192 and 1 GiB on a GPU; n = 1024 and 64 MiB on a CPU, where the matmul is fp32 whatever
    `precision` says.
    """
    import torch

    if device.type == "cpu":
        precision = "fp32"
    n, size = GPU_SIZES if device.type == "cuda" else CPU_SIZES
    n, size = matmul_n or n, copy_bytes or size
    matmul_s = _time_matmul(device, getattr(torch, DTYPES[precision]), n, repeats)
    copy_s, moved = _time_copy(device, size, repeats)
    label = f"{device_name(device)}, measured: {precision} matmul {n}×{n}, copy {moved // 2 >> 20} MiB"
    return Roofs(label, 2 * n**3 / matmul_s, moved / copy_s)


def _time_matmul(device: Any, dtype: Any, n: int, repeats: int) -> float:
    import torch

    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    out = torch.empty(n, n, device=device, dtype=dtype)
    return _best_seconds(lambda: torch.mm(a, b, out=out), device, repeats)


def _time_copy(device: Any, size: int, repeats: int) -> tuple[float, int]:
    """Seconds for the best copy of `size` bytes, and the bytes it moves (read once, written once)."""
    import torch

    src = torch.ones(size // 4, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    return _best_seconds(lambda: dst.copy_(src), device, repeats), 2 * src.numel() * src.element_size()
