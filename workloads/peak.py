"""Dense peak FLOP/s of known NVIDIA GPUs, for MFU, and their memory bandwidth, for the roofline.
Matched on `torch.cuda.get_device_name()`; each bandwidth figure names its datasheet beside it (_BANDWIDTH).

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
| L40S                   |    91.6 |   362.05 (733 sparse) | L40S datasheet                                  |
| RTX 4090               |    82.6 |   165.2             | Ada Lovelace whitepaper, FP32 accumulate          |
| RTX 5090               |   104.8 |   209.5             | RTX Blackwell whitepaper, FP32 accumulate         |
| V100 SXM2 / PCIe / S   | 15.7 / 14 / 16.4 | fp16 125 / 112 / 130, no bf16 | V100 datasheet              |
| T4                     |     8.1 |   fp16 65, no bf16  | T4 datasheet                                      |
"""

from __future__ import annotations

import re

from workloads.names import PRECISIONS

# (pattern, fp32, bf16, fp16) in FLOP/s; first match wins, so the more specific names come first.
_PEAKS: tuple[tuple[str, float, float | None, float], ...] = (
    (r"H100.*NVL|H200.*NVL", 60e12, 835.5e12, 835.5e12),
    (r"H100.*PCIe", 51e12, 756e12, 756e12),
    (r"H100|H200", 67e12, 989e12, 989e12),
    (r"A100", 19.5e12, 312e12, 312e12),
    (r"\bA10\b", 31.2e12, 125e12, 125e12),
    (r"\bL4\b", 30.3e12, 121e12, 121e12),
    (r"L40S", 91.6e12, 362.05e12, 362.05e12),
    (r"RTX 4090", 82.6e12, 165.2e12, 165.2e12),
    (r"RTX 5090", 104.8e12, 209.5e12, 209.5e12),
    (r"V100S", 16.4e12, None, 130e12),
    (r"V100.*PCIE", 14e12, None, 112e12),
    (r"V100", 15.7e12, None, 125e12),
    (r"\bT4\b", 8.1e12, None, 65e12),
)


# the GPUs of the tables above by their datasheets' own names: a name given by hand (`--gpu rtx4090`) is
# matched to one of these ignoring case, spaces, dashes and underscores, and spoken of by its datasheet name
DATASHEET_NAMES = ("H100", "H100 SXM", "H100 PCIe", "H100 NVL", "H200", "H200 NVL", "A100", "A10", "L4",
                   "L40S", "RTX 4090", "RTX 5090", "V100", "V100 PCIe", "V100S", "T4")  # fmt: skip


def _folded(name: str) -> str:
    return re.sub(r"[\s_-]+", "", name).casefold()


def datasheet_name(name: str) -> str:
    """The datasheet's own name of GPU `name` (`rtx4090`, `a-100`, `H100 sxm`: "RTX 4090", "A100", "H100
    SXM"); `name` itself when it is none of them (a name as torch gives it, matched by the patterns)."""
    return next((known for known in DATASHEET_NAMES if _folded(known) == _folded(name)), name)


def peak_flops(device_name: str, precision: str) -> float | None:
    """Dense peak FLOP/s of `device_name` at `precision`; None for an unknown device (a CPU) or no support."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    for pattern, fp32, bf16, fp16 in _PEAKS:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return {"fp32": fp32, "bf16": bf16, "fp16": fp16}[precision]
    return None


# (pattern, bytes/s) of device memory (HBM / GDDR), the datasheet's peak; first match wins. Names as
# torch.cuda.get_device_name() prints them: "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe",
# "NVIDIA H100 80GB HBM3" (SXM), "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200", "NVIDIA L40S".
_BANDWIDTH: tuple[tuple[str, float], ...] = (
    (r"H200", 4.8e12),  # H200 datasheet: H200 SXM and H200 NVL, 141 GB HBM3e, 4.8 TB/s
    (r"H100.*NVL", 3.9e12),  # H100 datasheet: H100 NVL, 94 GB HBM3, 3.9 TB/s
    (r"H100.*PCIe", 2.0e12),  # H100 datasheet: H100 PCIe, 80 GB HBM2e, 2 TB/s
    (r"H100", 3.35e12),  # H100 datasheet: H100 SXM, 80 GB HBM3, 3.35 TB/s
    (r"A100.*(80GB.*PCIe|PCIE.*80GB)", 1.935e12),  # A100 datasheet: A100 80GB PCIe, HBM2e, 1,935 GB/s
    (r"A100.*80GB", 2.039e12),  # A100 datasheet: A100 80GB SXM, HBM2e, 2,039 GB/s
    (r"A100", 1.555e12),  # A100 datasheet: A100 40GB (SXM and PCIe), HBM2, 1,555 GB/s
    (r"L40S", 864e9),  # L40S datasheet: 48 GB GDDR6, 864 GB/s
    (r"\bA10\b", 600e9),  # A10 datasheet: 24 GB GDDR6, 600 GB/s
    (r"\bL4\b", 300e9),  # L4 datasheet: 24 GB GDDR6, 300 GB/s
    (r"RTX 4090", 1008e9),  # Ada Lovelace whitepaper (RTX 4090): 24 GB GDDR6X, 21 Gbps × 384 bit = 1,008 GB/s
    (r"RTX 5090", 1792e9),  # RTX Blackwell whitepaper (RTX 5090): 32 GB GDDR7, 28 Gbps × 512 bit = 1,792 GB/s
    (r"V100S", 1134e9),  # V100S datasheet: 32 GB HBM2, 1,134 GB/s
    (r"V100", 900e9),  # V100 datasheet: SXM2 and PCIe, HBM2, 900 GB/s
    (r"\bT4\b", 320e9),  # T4 datasheet: 16 GB GDDR6, 320+ GB/s
)


def peak_bandwidth(device_name: str) -> float | None:
    """Datasheet memory bandwidth of `device_name` in bytes/s; None for an unknown device (a CPU)."""
    for pattern, bandwidth in _BANDWIDTH:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return bandwidth
    return None
