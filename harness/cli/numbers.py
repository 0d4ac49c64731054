"""The one rule of every number option (`--steps 8`, `--gate 2.5`): ASCII digits, refused otherwise in one
`error:` line, exit 2, before the command runs.

Click reads an int option with int() and a float option with float(), which take the digits of every script
(`--steps ٣` would run 3 steps, `--gate ３` gate at 3%) and underscores (`1_000`); and a value they refuse
prints click's usage block. Each number parameter's type is wrapped as each command loads
(harness.cli.load), as refuse_empty_paths wraps its path parameters, so a number option added later follows
the rule too. Ranges stay with each option's own check (at_least, the run's limits)."""

from __future__ import annotations

import math
import sys
from typing import Any

import click

from harness.cli.common import DECIMAL, WHOLE, OptionRefused
from harness.core.bounds import INT64_MAX


def number_kind(kind: Any) -> str | None:
    """`int` or `float` where click reads a parameter of type `kind` as that number (their ranges too), else
    None. By class name: Typer brings its own copy of click's types, and click has its own."""
    names = {c.__name__ for c in type(kind).__mro__}
    return "int" if "IntParamType" in names else "float" if "FloatParamType" in names else None


def param_name(param: click.Parameter) -> str:
    """How a message names `param`: an option by its first flag, an argument by its metavar."""
    if param.param_type_name == "option":
        return param.opts[0]
    return param.metavar or (param.name or "").upper()


class AsciiNumber:
    """A number parameter's type: the text given is checked here, then read by the parameter's own type
    (`inner`: its range, its conversion). A wrapper, not a subclass: Typer may bring its own copy of click's
    types."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.whole = number_kind(inner) == "int"

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __call__(self, value: Any, param: Any = None, ctx: Any = None) -> Any:
        return self.convert(value, param, ctx)

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, str) and param is not None:
            self.check(value.strip(), param)
            value = value.strip()
        return self.inner.convert(value, param, ctx)

    def check(self, text: str, param: click.Parameter) -> None:
        named = param_name(param)
        what = "a whole number" if self.whole else "a number"
        if not text:
            raise OptionRefused(f"{named} is empty: give {what}")
        if not (WHOLE if self.whole else DECIMAL).fullmatch(text):
            example = "8" if self.whole else "2.5"
            raise OptionRefused(f"{named} takes {what} in the digits 0-9 (e.g. {example}), got {text!r}")
        digits = text.lstrip("+-").lstrip("0")
        # int() refuses more digits than this with a ValueError
        if self.whole and len(digits) > (sys.get_int_max_str_digits() or math.inf):
            raise OptionRefused(
                f"{named} {digits[:20]}… ({len(digits)} digits) is out of range: at most {INT64_MAX}"
            )
        # digits past a float's range read as inf, which the option's own check would name, not what was typed
        if not self.whole and not text.lstrip("+-")[:1].isalpha() and math.isinf(float(text)):
            raise OptionRefused(f"{named} {text} is out of range: at most {sys.float_info.max:.4g}")


def refuse_odd_numbers(command: click.Command) -> None:
    """Every number parameter of `command` and of its sub-commands takes ASCII digits alone (AsciiNumber)."""
    for param in command.params:
        if number_kind(param.type) is not None:
            param.type = AsciiNumber(param.type)  # type: ignore[assignment]
    for sub in getattr(command, "commands", {}).values():
        refuse_odd_numbers(sub)
