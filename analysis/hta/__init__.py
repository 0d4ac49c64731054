"""Holistic Trace Analysis's view of a trace: its load rules, GPU events on streams, the time breakdown."""
