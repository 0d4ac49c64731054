"""How a count is said (workloads.names.counted): one thing in the singular, any other count in the plural."""

from __future__ import annotations

from workloads.names import counted


def test_one_is_singular_and_every_other_count_plural() -> None:
    assert counted(1, "measured step") == "1 measured step"
    assert [counted(n, "Kineto event") for n in (0, 2)] == ["0 Kineto events", "2 Kineto events"]
    assert counted(1_024, "kernel") == "1,024 kernels"
    assert (counted(1, "entry", "entries"), counted(3, "entry", "entries")) == ("1 entry", "3 entries")
