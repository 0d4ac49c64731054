"""The environment a run happened in, saved with it so results can be compared honestly."""

from __future__ import annotations

import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

import harness
from harness.core import nvtx_ranges

REPO_ROOT = Path(__file__).resolve().parents[2]


def git_commit(root: Path = REPO_ROOT) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def driver_version() -> str | None:
    """The NVIDIA driver version through NVML, or None where there is no driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # NVML raises its own error types, and ImportError where it is missing
        return None


def collect(device: Any = None) -> dict[str, Any]:
    import torch

    env: dict[str, Any] = {
        "harness": harness.__version__,
        "git_commit": git_commit(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nvtx_emitter": nvtx_ranges.EMITTER,
        "cpu_threads": torch.get_num_threads(),
    }
    if device is not None and device.type == "cuda":
        env["device_name"] = torch.cuda.get_device_name(device)
        env["cudnn"] = torch.backends.cudnn.version()
        env["driver"] = driver_version()
    return env
