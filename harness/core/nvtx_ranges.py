"""NVTX ranges the harness puts around steps and phases (and, with --nvtx-detail, around layers).

The emitter is the python `nvtx` package (pinned to 0.2.11: 0.2.12+ records nothing under nsys 2022.4); it
works with CPU and CUDA builds of torch and carries the step index as the range's int64 payload. Without a
profiler attached, NVTX calls are no-ops in the NVTX library (a few hundred ns each, per phase, not per op).
If the package is missing, `torch.cuda.nvtx` is used on CUDA builds (no payload), else nothing is emitted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import workloads
from workloads.names import MEASURED

_push: Callable[[str, int | None], None]
_pop: Callable[[], None]
EMITTER: str

try:
    import nvtx as _nvtx

    def _push(name: str, payload: int | None = None) -> None:
        _nvtx.push_range(name, payload=payload)

    def _pop() -> None:
        _nvtx.pop_range()

    EMITTER = f"nvtx {getattr(_nvtx, '__version__', '')}".strip()
except ImportError:  # pragma: no cover - depends on the install
    try:
        import torch

        if not torch.cuda.is_available():
            raise ImportError
        _tnvtx = torch.cuda.nvtx

        def _push(name: str, payload: int | None = None) -> None:
            _tnvtx.range_push(name)

        def _pop() -> None:
            _tnvtx.range_pop()

        EMITTER = "torch.cuda.nvtx"
    except ImportError:

        def _push(name: str, payload: int | None = None) -> None:
            return None

        def _pop() -> None:
            return None

        EMITTER = "none"


# A second emitter beside NVTX (harness.profilers.torch: record_function ranges of the same names), as
# (enter(name) -> handle, exit(handle)); `measured` is not mirrored: that profiler's schedule is the
# measured steps already.
Mirror = tuple[Callable[[str], Any], Callable[[Any], None]]
_mirror: Mirror | None = None
_open: list[Any] = []


def set_mirror(mirror: Mirror | None) -> None:
    global _mirror
    _mirror = mirror
    _open.clear()


def push(name: str, payload: int | None = None) -> None:
    _push(name, payload)
    if _mirror is not None:
        _open.append(_mirror[0](name) if name != MEASURED else None)


def pop() -> None:
    _pop()
    if _mirror is not None and _open:
        handle = _open.pop()
        if handle is not None:
            _mirror[1](handle)


@contextlib.contextmanager
def nvtx_range(name: str, payload: int | None = None) -> Iterator[None]:
    push(name, payload)
    try:
        yield
    finally:
        pop()


def range_name(qualname: str, detail: dict[str, str], outer: dict[str, str] | None = None) -> str | None:
    """The --nvtx-detail range name of submodule `qualname`, or None: blocks.N is "layer_N"; under blocks.,
    a qualname ending in a `detail` suffix ("attn.qkv") takes its name ("qkv_proj"); anywhere, one whose
    last part is in `outer` ("ln_f") takes that name ("norm")."""
    parts = qualname.split(".")
    if len(parts) == 2 and parts[0] == "blocks" and parts[1].isdigit():
        return f"layer_{parts[1]}"
    if parts[0] == "blocks":
        for suffix, rname in detail.items():
            if qualname.endswith("." + suffix):
                return rname
    if outer and qualname and parts[-1] in outer:
        return outer[parts[-1]]
    return None


def block_names() -> set[str]:
    """Every --nvtx-detail range name that is a block (the layers' layer_N aside)."""
    return set(workloads.DETAIL_RANGES.values()) | set(workloads.OUTER_RANGES.values())


def attach_detail_ranges(
    model: Any, detail: dict[str, str], outer: dict[str, str] | None = None
) -> list[Any]:
    """Forward hooks that put an NVTX range around each block and each named piece inside it.

    `detail` maps submodule-name suffixes ("attn.qkv") to range names ("qkv_proj"); blocks become
    "layer_{i}"; `outer` names pieces outside attention and MLP (range_name). Returns the hook handles
    (call .remove() on each to detach).
    """
    handles = []

    def pre(name: str) -> Callable[..., None]:
        def hook(module: Any, args: Any) -> None:
            push(name, None)

        return hook

    def post(module: Any, args: Any, output: Any) -> None:
        pop()

    for qualname, module in model.named_modules():
        name = range_name(qualname, detail, outer)
        if name is not None:
            handles.append(module.register_forward_pre_hook(pre(name)))
            handles.append(module.register_forward_hook(post))
    return handles
