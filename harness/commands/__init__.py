"""Typer command groups. Each module's `register(app)` adds its commands; heavy imports stay inside them."""
