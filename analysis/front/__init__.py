"""The doors the harness and notebooks come in by, the top of analysis: each takes plain data (paths, frames,
names) and hands back what the rooms below build from it. reading.py: tables from the sources a user names,
cache policy included; examine.py: a run's capture read once, and what a run says about itself;
notebook.py (`open`): the tables from Python."""

from analysis.front.notebook import Report, open

__all__ = ["Report", "open"]
