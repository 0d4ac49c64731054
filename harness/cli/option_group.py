"""`option_group`: a dataclass's fields as one command's options; `spec_group`: such a dataclass made from
options declared as plain data (analysis.tables.table.Option: a table's own). Apart from the workload
options (harness.cli.options), whose module loads the run records, so that the commands that read exports
(`harness kernels`: its start-up is part of its time) do not."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import field, fields, make_dataclass
from enum import StrEnum
from inspect import Parameter, Signature, signature
from typing import Annotated, Any, TypeVar, get_type_hints

import typer

from analysis.tables.table import Option

F = TypeVar("F", bound=Callable[..., Any])


def typer_form(option: Option) -> tuple[Any, Any]:
    """The command-line form of a declared option, as a dataclass field of an option group takes it: its
    annotation (`Annotated[type, typer.Option(...)]`; choices as an enum, whose values the command gets)
    and its default."""
    kind: Any = option.kind
    default = option.default
    if option.choices:
        kind = StrEnum(option.name, {c: c for c in option.choices})  # type: ignore[misc]
        default = None if default is None else kind(default)
    form = typer.Option(option.flag, help=option.help, metavar=option.metavar, min=option.minimum,
                        show_default=option.show_default)  # fmt: skip
    return Annotated[kind if kind is bool or default is not None else kind | None, form], default


def spec_group(name: str, options: Sequence[Option]) -> type:
    """A frozen dataclass with a field per declared option, each with its command-line form: for
    `option_group`, so that a command made from declarations gets them as its options."""
    made = [(o.name, *_field(o)) for o in options]
    return make_dataclass(name, made, frozen=True)


def _field(option: Option) -> tuple[Any, Any]:
    annotation, default = typer_form(option)
    return annotation, field(default=default)


def values_of(group: Any) -> dict[str, Any]:
    """An option group's values by field name, an enum's as its value."""
    return {f.name: _plain(getattr(group, f.name)) for f in fields(group)}


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, StrEnum) else value


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
