"""Planted bottlenecks: the catalogue (catalogue.py: each cause, its rule and its fixes, as data) and the
code that plants each in the train step (steps.py, plain PyTorch), and `python -m workloads.plants CAUSE`,
the same step as a user's program.

Importing the package loads no torch: the catalogue serves `--help` and the checks of a configuration in a
process that never builds a model; the names of steps.py are taken from it on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from workloads.plants.catalogue import CAUSES, FIXES, KNOBS, NAMES, Knobs

if TYPE_CHECKING:
    from workloads.plants.steps import PLANTS, SAMPLE_WAIT_S, Plant, SlowLoader, make

__all__ = ["CAUSES", "FIXES", "KNOBS", "NAMES", "PLANTS", "SAMPLE_WAIT_S", "Knobs", "Plant",
           "SlowLoader", "make"]  # fmt: skip


def __getattr__(name: str) -> Any:
    steps = importlib.import_module("workloads.plants.steps")
    try:
        value = getattr(steps, name)
    except AttributeError:
        raise AttributeError(f"module 'workloads.plants' has no attribute {name!r}") from None
    globals()[name] = value
    return value
