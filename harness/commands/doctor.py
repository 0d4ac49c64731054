"""Placeholder: filled in by its owner."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    return None
