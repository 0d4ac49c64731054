"""The layers point one way (docs/architecture.md), checked by walking every import with ast:

workloads/ imports nothing of ours; analysis/ imports nothing from harness/ (or workloads/); no library
module of harness/ imports harness.cli or harness.cli; and no two modules import each other in a
loop, lazy imports inside functions included.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "analysis", "workloads")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """Every module of ours that `path` imports, at the top or inside a function: for `from X import Y`,
    X.Y where that is a module, else X."""
    tree = ast.parse(path.read_text(), filename=str(path))
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base]) if base else ".".join(parent)
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in out if m.split(".")[0] in PACKAGES}


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = {m if m in modules else m.rpartition(".")[0] for m in imports_of(path, set(modules))}
        edges[name] = {m for m in found if m in modules and m != name}
    return edges


def test_workloads_import_nothing_of_ours() -> None:
    bad = {m: sorted(d) for m, d in graph().items() if m.startswith("workloads") and
           any(not x.startswith("workloads") for x in d)}  # fmt: skip
    assert bad == {}


def test_analysis_imports_nothing_from_harness() -> None:
    bad = {m: sorted(x for x in d if not x.startswith("analysis")) for m, d in graph().items()
           if m.startswith("analysis") and any(not x.startswith("analysis") for x in d)}  # fmt: skip
    assert bad == {}


def test_library_modules_do_not_import_the_cli() -> None:
    bad = {
        m: sorted(x for x in d if x.startswith(("harness.cli", "harness.cli")))
        for m, d in graph().items()
        if m.startswith("harness")
        and not m.startswith(("harness.cli", "harness.cli", "harness.__main__"))
        and any(x.startswith(("harness.cli", "harness.cli")) for x in d)
    }
    assert bad == {}


def test_no_import_cycles() -> None:
    edges = graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    assert cycles == []


def test_the_walker_sees_lazy_imports() -> None:
    edges = graph()
    assert "analysis.nvtx_gpu" in edges["analysis.kernels"]  # imported inside kernel_summary
    assert "analysis.trace" in edges["analysis.kernels"]
