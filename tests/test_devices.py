"""Device helpers: out-of-memory detection for every allocator the harness can meet."""

from __future__ import annotations

import pytest
import torch

from harness.core.devices import is_oom


def test_a_failed_cpu_allocation_is_out_of_memory() -> None:
    with pytest.raises(RuntimeError) as failed:
        torch.empty(2**62, dtype=torch.uint8)  # 4 EiB: past any address space, refused at once
    assert is_oom(failed.value)


def test_cuda_out_of_memory_and_other_errors() -> None:
    assert is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not is_oom(RuntimeError("expected scalar type Float but found Half"))
    assert not is_oom(ValueError("out of memory"))  # only the allocators' errors count
