"""The doors the harness and notebooks come in by, the top of analysis: each takes plain data (paths, frames,
names) and hands back what the rooms below build from it. reading.py: tables from the sources a user names,
cache policy included; examine.py: a run's capture read once, and what a run says about itself;
notebook.py (`open`): the tables from Python.

`open` and `Report` are loaded on first use (PEP 562): the notebook door brings advice and the dashboard
(pandas, plotly), which a command that only reads tables (analysis.front.reading) never needs."""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from analysis.front.notebook import Report, open

__all__ = ["Report", "open"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("analysis.front.notebook"), name)
    raise AttributeError(f"module 'analysis.front' has no attribute {name!r}")
