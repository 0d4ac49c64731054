"""Readers: one per trace format, each filling the frames of `analysis.trace.FRAMES` from its files."""
