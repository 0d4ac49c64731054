"""Imports that run their module on first use: `with deferred(): from analysis.tables import tables`.

The statement is a real import (tests/test_layers.py sees it, as it sees any other), but the module it binds
is not run yet: the first name asked of it (`tables.TABLES`) runs it, once, and from then on it is the
module as a plain import would have left it. A command module can so name pandas-, SQLAlchemy-, plotly- or
torch-bound modules at its top and `harness --help` still loads none of them.

Only our own packages (harness, analysis, workloads) are deferred, and only inside the `with`: what a
deferred module imports when it runs is imported as usual. A deferred package serves what the import system
has already bound on it (`__path__`, `__spec__`, its submodules imported so far) without running: so
`with deferred(): from workloads import roofline` runs neither workloads/__init__.py nor torch.
Modules imported before the `with` are the modules already loaded, and stay so.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
import types
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

OURS = frozenset({"harness", "analysis", "workloads"})
_running = threading.RLock()  # one module run at a time; a thread asking meanwhile waits for it
_busy: set[int] = set()  # the modules being run (by the thread holding _running)


class _Pending(types.ModuleType):
    """A module imported but not run: any name not yet bound on it runs it first."""

    def __getattribute__(self, name: str) -> Any:
        bound = object.__getattribute__(self, "__dict__")
        if name in bound or name in ("__class__", "__dict__"):
            return object.__getattribute__(self, name)
        if "__path__" in bound and _FINDER in sys.meta_path and not name.startswith("__"):
            # `from package import name` inside deferred(): a submodule is imported (deferred), not run
            full = f"{bound['__name__']}.{name}"
            try:
                importlib.import_module(full)
            except ModuleNotFoundError as e:
                if e.name != full:
                    raise
            else:
                return object.__getattribute__(self, name)  # bound on it by the import
        _run(self)
        if type(self) is _Pending:  # this thread is running it: a module part-way through its code
            return types.ModuleType.__getattribute__(self, name)
        return getattr(self, name)


def _run(module: types.ModuleType) -> None:
    with _running:
        if type(module) is not _Pending or id(module) in _busy:  # run, or being run by this thread
            return
        bound = object.__getattribute__(module, "__dict__")
        spec = bound["__spec__"]
        loader = spec.loader.loader  # the real one, behind _Deferring
        spec.loader = bound["__loader__"] = loader
        _busy.add(id(module))
        try:
            loader.exec_module(module)
        except BaseException:  # as a failed import: not left in sys.modules
            if sys.modules.get(spec.name) is module:
                del sys.modules[spec.name]
            raise
        finally:
            _busy.discard(id(module))
            module.__class__ = types.ModuleType


class _Deferring:
    """The loader the finder found, with its `exec_module` put off until a name is asked of the module."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__class__ = _Pending


class _Finder:
    """Finds our modules as the other finders do, with their loading deferred."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> ModuleSpec | None:
        if name.partition(".")[0] not in OURS:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Deferring(spec.loader)
                return spec
        return None


_FINDER = _Finder()


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Inside: imports of our modules not loaded yet bind modules that run on first use."""
    if _FINDER in sys.meta_path:  # nested
        yield
        return
    sys.meta_path.insert(0, _FINDER)
    try:
        yield
    finally:
        sys.meta_path.remove(_FINDER)
