"""Dense peak FLOP/s of known NVIDIA GPUs, for MFU. Matched on `torch.cuda.get_device_name()`.

Numbers are NVIDIA's datasheet / architecture-whitepaper peaks at boost clock, *without* 2:4 sparsity
(datasheets print the sparse figure for tensor cores; the dense one is half of it):

- fp32: the CUDA-core FP32 rate, not TF32. PyTorch leaves `torch.backends.cuda.matmul.allow_tf32` off
  by default, so fp32 matmuls run there; a run that turns TF32 on can exceed 100% "MFU".
- bf16 / fp16: the tensor-core rate with FP32 accumulation (what PyTorch's matmuls use). On GeForce
  cards that is half the FP16-accumulate rate the marketing pages quote.

| GPU                    | fp32 TF | bf16/fp16 TF | source                                                   |
|------------------------|--------:|-------------:|----------------------------------------------------------|
| H100 SXM, H200         |    67   |   989 (1979 sparse) | H100 / H200 datasheets                            |
| H100 NVL, H200 NVL     |    60   |   835.5 (1671 sparse) | H100 NVL / H200 NVL datasheets                  |
| H100 PCIe              |    51   |   756 (1513 sparse) | H100 datasheet                                    |
| A100 (SXM and PCIe)    |    19.5 |   312 (624 sparse)  | A100 datasheet                                    |
| A10                    |    31.2 |   125 (250 sparse)  | A10 datasheet                                     |
| L4                     |    30.3 |   121 (242 sparse)  | L4 datasheet                                      |
| RTX 4090               |    82.6 |   165.2             | Ada Lovelace whitepaper, FP32 accumulate          |
| RTX 5090               |   104.8 |   209.5             | RTX Blackwell whitepaper, FP32 accumulate         |
| V100 SXM2 / PCIe / S   | 15.7 / 14 / 16.4 | fp16 125 / 112 / 130, no bf16 | V100 datasheet              |
| T4                     |     8.1 |   fp16 65, no bf16  | T4 datasheet                                      |
"""

from __future__ import annotations

import re

PRECISIONS = ("fp32", "bf16", "fp16")

# (pattern, fp32, bf16, fp16) in FLOP/s; first match wins, so the more specific names come first.
_PEAKS: tuple[tuple[str, float, float | None, float], ...] = (
    (r"H100.*NVL|H200.*NVL", 60e12, 835.5e12, 835.5e12),
    (r"H100.*PCIe", 51e12, 756e12, 756e12),
    (r"H100|H200", 67e12, 989e12, 989e12),
    (r"A100", 19.5e12, 312e12, 312e12),
    (r"\bA10\b", 31.2e12, 125e12, 125e12),
    (r"\bL4\b", 30.3e12, 121e12, 121e12),
    (r"RTX 4090", 82.6e12, 165.2e12, 165.2e12),
    (r"RTX 5090", 104.8e12, 209.5e12, 209.5e12),
    (r"V100S", 16.4e12, None, 130e12),
    (r"V100.*PCIE", 14e12, None, 112e12),
    (r"V100", 15.7e12, None, 125e12),
    (r"\bT4\b", 8.1e12, None, 65e12),
)


def peak_flops(device_name: str, precision: str) -> float | None:
    """Dense peak FLOP/s of `device_name` at `precision`; None for an unknown device (a CPU) or no support."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    for pattern, fp32, bf16, fp16 in _PEAKS:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return {"fp32": fp32, "bf16": bf16, "fp16": fp16}[precision]
    return None
