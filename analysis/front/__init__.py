"""The doors the harness comes in by: each takes plain data (paths, frames, names) and hands back what the
rooms below build from it. examine.py: a run's capture read once, and what a run says about itself."""
