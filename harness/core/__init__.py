"""Shared by every layer: run configuration and records, devices, errors, environment, signals."""
