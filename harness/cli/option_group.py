"""`option_group`: a dataclass's fields as one command's options. Apart from the workload options
(harness.cli.options), whose module loads the run records, so that the commands that read exports
(`harness kernels`: its start-up is part of its time) do not."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import fields
from inspect import Parameter, Signature, signature
from typing import Any, TypeVar, get_type_hints

F = TypeVar("F", bound=Callable[..., Any])


def option_group(
    param: str,
    group: type,
    omit: tuple[str, ...] = (),
    after: dict[str, tuple[str, ...]] | None = None,
) -> Callable[[F], F]:
    """Give a command the options of the dataclass `group` (each field annotated with its command-line
    form, an `Annotated[type, typer.Option(...)]`) in place of its parameter `param`, leaving out `omit`,
    and hand it one `group` object; `after` moves some of the command's own options in among them
    ({"batch_size": ("batch_sizes",)} shows --batch-sizes right after --batch-size). A field left out gets
    its default."""
    names = [f.name for f in fields(group) if f.name not in omit]
    defaults = {f.name: f.default for f in fields(group)}
    forms = get_type_hints(group, include_extras=True)

    def wrap(fn: F) -> F:
        hints = get_type_hints(fn, include_extras=True)
        params_of = signature(fn).parameters.values()
        own = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in params_of]
        at = next(i for i, p in enumerate(own) if p.name == param)
        moved = {name for names_after in (after or {}).values() for name in names_after}
        by_name = {p.name: p for p in own}
        options: list[Parameter] = []
        for name in names:
            options.append(Parameter(name, Parameter.POSITIONAL_OR_KEYWORD, default=defaults[name],
                                     annotation=forms[name]))  # fmt: skip
            options += [by_name[n] for n in (after or {}).get(name, ())]
        rest = [p for p in own if p.name not in moved]
        params = [*rest[:at], *options, *rest[at + 1 :]]

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            values = group(**{name: kwargs.pop(name) for name in names})
            return fn(**{param: values}, **kwargs)

        command.__signature__ = Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command  # type: ignore[return-value]

    return wrap
