"""The doors harness and notebooks come in by, the top of analysis: reading.py (tables from the sources a
user names, cache policy included), notebook.py (`open`: the same from Python)."""

from analysis.front.notebook import Report, open

__all__ = ["Report", "open"]
