"""Dense peak FLOP/s of known NVIDIA GPUs, for MFU, and their memory bandwidth, for the roofline.
One entry of `GPUS` per device: its datasheet names, the pattern matched on `torch.cuda.get_device_name()`,
its peaks, and the datasheet each figure comes from beside it.

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
from dataclasses import dataclass

from workloads.names import PRECISIONS


@dataclass(frozen=True)
class Gpu:
    """One device of the datasheets. `names`: its datasheets' own names (a name given by hand, `--gpu
    rtx4090`, is matched to one of these ignoring case, spaces, dashes and underscores); `pattern`: matched
    on the name torch gives it; FLOP/s per precision (None: no support); `bandwidth`: device memory (HBM /
    GDDR), the datasheet's peak, in bytes/s."""

    names: tuple[str, ...]
    pattern: str
    fp32: float
    bf16: float | None
    fp16: float
    bandwidth: float


# A GeForce name with "D" (the export version) or "Laptop GPU" after it is another chip, with other peaks.
OTHER_CHIP = r"(?!\s*(D|Laptop)\b)"

# Patterns match whole model names (`\bA100\b`): "RTX A1000", "Quadro GV100", "GH200" are other devices.
# First match wins, so the more specific names come first. Names as torch.cuda.get_device_name() prints
# them: "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA H100 80GB HBM3" (SXM), "NVIDIA H100 PCIe",
# "NVIDIA H100 NVL", "NVIDIA H200", "NVIDIA L40S". Bandwidth sources beside each entry.
GPUS: tuple[Gpu, ...] = (
    # H200 datasheet: H200 NVL, 141 GB HBM3e, 4.8 TB/s
    Gpu(("H200 NVL",), r"\bH200\b.*NVL", 60e12, 835.5e12, 835.5e12, 4.8e12),
    # H100 datasheet: H100 NVL, 94 GB HBM3, 3.9 TB/s
    Gpu(("H100 NVL",), r"\bH100\b.*NVL", 60e12, 835.5e12, 835.5e12, 3.9e12),
    # H100 datasheet: 80 GB HBM2e, 2 TB/s
    Gpu(("H100 PCIe",), r"\bH100\b.*PCIe", 51e12, 756e12, 756e12, 2.0e12),
    # H200 datasheet: H200 SXM, 141 GB HBM3e, 4.8 TB/s
    Gpu(("H200",), r"\bH200\b", 67e12, 989e12, 989e12, 4.8e12),
    # H100 datasheet: H100 SXM, 80 GB HBM3, 3.35 TB/s
    Gpu(("H100", "H100 SXM"), r"\bH100\b", 67e12, 989e12, 989e12, 3.35e12),
    # A100 datasheet: 80GB PCIe, HBM2e, 1,935 GB/s; 80GB SXM, HBM2e, 2,039 GB/s; 40GB (SXM and PCIe), HBM2,
    # 1,555 GB/s: "A100" is the 40GB one.
    Gpu(("A100 80GB PCIe",), r"\bA100\b.*(80GB.*PCIe|PCIE.*80GB)", 19.5e12, 312e12, 312e12, 1.935e12),
    Gpu(("A100 80GB SXM",), r"\bA100\b.*80GB", 19.5e12, 312e12, 312e12, 2.039e12),
    Gpu(("A100",), r"\bA100\b", 19.5e12, 312e12, 312e12, 1.555e12),
    Gpu(("A10",), r"\bA10\b", 31.2e12, 125e12, 125e12, 600e9),  # A10 datasheet: 24 GB GDDR6, 600 GB/s
    Gpu(("L4",), r"\bL4\b", 30.3e12, 121e12, 121e12, 300e9),  # L4 datasheet: 24 GB GDDR6, 300 GB/s
    # L40S datasheet: 48 GB GDDR6, 864 GB/s
    Gpu(("L40S",), r"\bL40S\b", 91.6e12, 362.05e12, 362.05e12, 864e9),
    # Ada Lovelace whitepaper (RTX 4090): 24 GB GDDR6X, 21 Gbps × 384 bit = 1,008 GB/s
    Gpu(("RTX 4090",), r"RTX 4090\b" + OTHER_CHIP, 82.6e12, 165.2e12, 165.2e12, 1008e9),
    # RTX Blackwell whitepaper (RTX 5090): 32 GB GDDR7, 28 Gbps × 512 bit = 1,792 GB/s
    Gpu(("RTX 5090",), r"RTX 5090\b" + OTHER_CHIP, 104.8e12, 209.5e12, 209.5e12, 1792e9),
    Gpu(("V100S",), r"\bV100S\b", 16.4e12, None, 130e12, 1134e9),  # V100S datasheet: 32 GB HBM2, 1,134 GB/s
    Gpu(("V100 PCIe",), r"\bV100\b.*PCIE", 14e12, None, 112e12, 900e9),  # V100 datasheet: HBM2, 900 GB/s
    Gpu(("V100",), r"\bV100\b", 15.7e12, None, 125e12, 900e9),  # V100 datasheet: SXM2, HBM2, 900 GB/s
    Gpu(("T4",), r"\bT4\b", 8.1e12, None, 65e12, 320e9),  # T4 datasheet: 16 GB GDDR6, 320+ GB/s
)

# every datasheet name of GPUS, alphabetical: what a name given by hand may be
DATASHEET_NAMES = tuple(sorted((name for gpu in GPUS for name in gpu.names), key=str.casefold))


def _folded(name: str) -> str:
    return re.sub(r"[\s_-]+", "", name).casefold()


def datasheet_name(name: str) -> str | None:
    """The datasheet's own name of GPU `name` given by hand (`rtx4090`, `a-100`, `H100 sxm`: "RTX 4090",
    "A100", "H100 SXM"); None when it is none of them. Only a whole name is one: "H100*" or "my H100" is
    not, though the patterns, made for the names torch gives, would find an H100 in it."""
    return next((known for known in DATASHEET_NAMES if _folded(known) == _folded(name)), None)


def gpu(device_name: str) -> Gpu | None:
    """The entry of GPUS whose pattern `device_name` matches first; None for an unknown device (a CPU)."""
    return next((g for g in GPUS if re.search(g.pattern, device_name, flags=re.IGNORECASE)), None)


def peak_flops(device_name: str, precision: str) -> float | None:
    """Dense peak FLOP/s of `device_name` at `precision`; None for an unknown device (a CPU) or no support."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    known = gpu(device_name)
    return None if known is None else {"fp32": known.fp32, "bf16": known.bf16, "fp16": known.fp16}[precision]


def peak_bandwidth(device_name: str) -> float | None:
    """Datasheet memory bandwidth of `device_name` in bytes/s; None for an unknown device (a CPU)."""
    known = gpu(device_name)
    return None if known is None else known.bandwidth
