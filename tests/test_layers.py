"""The layers point one way (docs/dev/architecture.md), checked by walking every import with ast:

workloads/ imports nothing of ours; analysis/ imports nothing from harness/, and from workloads/ only the
words a run is described in (workloads.names, which imports nothing); harness/core imports nothing from
analysis/; the
sub-packages of harness/ import only those below them in LAYERS (harness.cli at the top, harness.core at
the bottom; a module may import its own sub-package, and any may read harness.__version__); analysis/'s
sub-packages likewise import only those below them in ANALYSIS_LAYERS, with the few modules shared by all
(ANALYSIS_SHARED, directly in analysis/) below every sub-package; and no two modules import each other in
a loop, lazy imports inside functions included.
"""

from __future__ import annotations

import ast
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "analysis", "workloads")
# harness's sub-packages, top first: each imports only those after it
LAYERS = ("cli", "experiments", "profilers", "execution", "energy", "store", "core")
# analysis's sub-packages, top first: each imports only those after it, and the shared modules
ANALYSIS_LAYERS = (
    "front", "dashboard", "advice", "compare", "ranks", "views", "runs", "tables", "hta", "joins", "trace",
    "readers",
)  # fmt: skip
# the modules directly in analysis/, below every sub-package: they import only each other
ANALYSIS_SHARED = ("errors", "intervals", "nvtx_names", "outputs", "stats")


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
    bad = {m: sorted(x for x in d if not x.startswith("analysis") and x != "workloads.names")
           for m, d in graph().items() if m.startswith("analysis")}  # fmt: skip
    assert {m: d for m, d in bad.items() if d} == {}


def test_harness_core_imports_nothing_from_analysis() -> None:
    bad = {m: sorted(x for x in d if x.startswith("analysis")) for m, d in graph().items()
           if m.startswith("harness.core")}  # fmt: skip
    assert {m: d for m, d in bad.items() if d} == {}


# The harness modules that cross into analysis/, each for its reason (docs/dev/architecture.md, "The
# border"): a new crossing is named here, or goes through one of these
BORDER = {
    # the front doors: a capture read once (analysis.front.examine), an export's tables
    "harness.profilers.capture": "the examine step: a run's export or trace (a program's too) read once, "
    "and every run's own figures (phases, first step, energy) computed before it is stored",
    "harness.experiments.advice": "a stored run judged; an export's health, findings and nsys rules",
    "harness.experiments.run_tables": "a run's step figures; a stored run's blocks read from its trace",
    "harness.cli": "the table commands' names and summaries in `harness --help`, from the table registry",
    "harness.cli.analysis": "the table commands, and a table's options as the command line's (on `run` too)",
    # pages and views written to a file
    "harness.experiments.pages": "the dashboard, and an export as a Chrome trace",
    # the figures: computed where they are made or stored
    "harness.experiments.diff": "two runs or exports compared, and their page",
    "harness.experiments.overhead": "a profiler's overhead",
    "harness.experiments.drift": "the drift between runs of a configuration, measured from the stored runs",
    "harness.experiments.optimize": "a configuration's findings, and each change for them measured",
    "harness.experiments.ranks": "a run across ranks, and its page",
    "harness.experiments.roofline": "a run on the device's roofs, and its page",
    "harness.experiments.selftest": "the doctor's self-tests: their exports read back and checked",
    "harness.execution.compiled": "eager and compiled runs compared (`compare-compile`)",
    # analysis's errors and its rules for written files
    "harness.cli.common": "the CLI's error handler; where a written file may go (--db's too: not the output)",
}


def test_the_border_is_a_few_named_doors() -> None:
    crossing = {m for m, d in graph().items() if m.startswith("harness") and
                any(x.split(".")[0] == "analysis" for x in d)}  # fmt: skip
    assert crossing == set(BORDER)


def test_the_words_of_a_run_load_no_torch() -> None:
    """analysis/ and harness --help import workloads.names: it must not pull in the models."""
    import subprocess

    code = "import sys, workloads.names, workloads; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.strip() == "False"


def layer_of(module: str) -> str | None:
    """The sub-package of harness a module is in (None: outside harness, or harness/__init__, __main__)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "harness" and len(parts) > 1 and parts[1] in LAYERS else None


def upward_imports(edges: dict[str, set[str]]) -> dict[str, list[str]]:
    """module of harness -> what it imports from a sub-package above its own (or from a harness module in
    no sub-package; harness/__init__, the version, is for all)."""
    bad: dict[str, list[str]] = {}
    for module, deps in edges.items():
        if not module.startswith("harness") or module == "harness.__main__":
            continue
        mine = layer_of(module)
        for dep in deps:
            if not dep.startswith("harness."):
                continue
            theirs = layer_of(dep)
            if mine is None or theirs is None or LAYERS.index(theirs) < LAYERS.index(mine):
                bad.setdefault(module, []).append(dep)
    return {m: sorted(d) for m, d in bad.items()}


def test_every_harness_module_is_in_a_sub_package() -> None:
    loose = sorted(m for m in graph() if m.startswith("harness.") and layer_of(m) is None)
    assert loose == ["harness.__main__"]


def test_sub_packages_import_only_those_below_them() -> None:
    assert upward_imports(graph()) == {}


def test_the_layer_check_fails_on_an_upward_import() -> None:
    edges = graph()
    edges["harness.core.records"] = edges["harness.core.records"] | {"harness.store.results"}
    edges["harness.execution.runner"] = edges["harness.execution.runner"] | {"harness.cli.run"}
    assert upward_imports(edges) == {
        "harness.core.records": ["harness.store.results"],
        "harness.execution.runner": ["harness.cli.run"],
    }


def test_the_layer_check_finds_a_planted_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real file with an upward import, planted in a copy of the tree, is found by the walk itself."""
    copy = tmp_path / "repo"
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, copy / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "harness" / "core" / "planted.py").write_text("from harness.experiments import sweep\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", copy)
    assert upward_imports(graph()) == {"harness.core.planted": ["harness.experiments.sweep"]}


def analysis_floor(module: str) -> int:
    """How high a module of analysis sits: its sub-package's place counted from the bottom, 0 for a shared
    module (and for analysis/__init__, which imports nothing); -1 for a module in neither."""
    parts = module.split(".")
    if len(parts) == 1 or (len(parts) == 2 and parts[1] in ANALYSIS_SHARED):
        return 0
    return len(ANALYSIS_LAYERS) - ANALYSIS_LAYERS.index(parts[1]) if parts[1] in ANALYSIS_LAYERS else -1


def analysis_upward_imports(edges: dict[str, set[str]]) -> dict[str, list[str]]:
    """module of analysis -> what it imports from a sub-package above its own, or from a module in none."""
    bad: dict[str, list[str]] = {}
    for module, deps in edges.items():
        if module.split(".")[0] != "analysis":
            continue
        mine = analysis_floor(module)
        for dep in deps:
            if dep.split(".")[0] == "analysis" and not 0 <= analysis_floor(dep) <= mine:
                bad.setdefault(module, []).append(dep)
    return {m: sorted(d) for m, d in bad.items()}


def test_every_analysis_module_is_in_a_sub_package_or_shared() -> None:
    loose = sorted(m for m in graph() if m.startswith("analysis") and analysis_floor(m) < 0)
    assert loose == []
    top = {p.stem for p in (REPO / "analysis").glob("*.py")} - {"__init__"}
    assert sorted(top) == sorted(ANALYSIS_SHARED)
    assert len(top) <= 8  # a newcomer can hold the top of analysis/ in mind


def test_analysis_sub_packages_import_only_those_below_them() -> None:
    assert analysis_upward_imports(graph()) == {}


def test_the_analysis_layer_check_fails_on_an_upward_import() -> None:
    edges = graph()
    edges["analysis.trace.trace"] = edges["analysis.trace.trace"] | {"analysis.tables.kernels"}
    edges["analysis.stats"] = edges["analysis.stats"] | {"analysis.readers.nsys"}
    edges["analysis.views.blocks"] = edges["analysis.views.blocks"] | {"analysis.compare.diff"}
    assert analysis_upward_imports(edges) == {
        "analysis.views.blocks": ["analysis.compare.diff"],
        "analysis.stats": ["analysis.readers.nsys"],
        "analysis.trace.trace": ["analysis.tables.kernels"],
    }


def test_the_analysis_layer_check_finds_a_planted_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real module with an upward import, planted in a copy of analysis/, is found by the walk itself;
    so is a module dropped loose at the top."""
    copy = tmp_path / "repo"
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, copy / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "analysis" / "joins" / "planted.py").write_text(
        "def f():\n    from analysis.hta import breakdown\n"
    )
    (copy / "analysis" / "loose.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "REPO", copy)
    assert analysis_upward_imports(graph()) == {"analysis.joins.planted": ["analysis.hta.breakdown"]}
    with pytest.raises(AssertionError):
        test_every_analysis_module_is_in_a_sub_package_or_shared()


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
    assert "analysis.tables.range_kernels" in edges["analysis.tables.kernels"]  # its range lookup
    assert "analysis.stats" in edges["analysis.tables.kernels"]  # imported inside kernel_table
    assert "analysis.trace.trace" in edges["analysis.tables.kernels"]
    assert "harness.store.results" in edges["harness.cli.run"]
    assert "workloads" in edges["harness.execution.runner"]


# the imports of our own modules still made inside a function, each for a reason written beside it: the two
# readers a command may never need, a worker's rows narrowed (numpy) in the module that holds what tasks
# send back, the table machinery over several exports (pandas), and what the front door and the table
# commands open and compute with (a table served from the cache needs no numpy, pandas or pyarrow)
LAZY_IMPORTS = {
    ("analysis/front/reading.py", "analysis.ranks.capture_ranks"),
    ("analysis/front/reading.py", "analysis.trace.multi_run"),
    ("analysis/front/reading.py", "analysis.trace.opening"),
    ("analysis/tables/__init__.py", "analysis.trace.multi_run"),
    ("analysis/tables/table.py", "analysis.trace.multi_combine"),
    ("analysis/trace/multi.py", "analysis.stats"),
    ("analysis/trace/exports.py", "analysis.trace.opening"),
    ("analysis/trace/opening.py", "analysis.readers"),
    ("harness/cli/analysis.py", "analysis.hta"),
    ("harness/cli/analysis.py", "analysis.ranks.capture_ranks"),  # breakdown: one capture split by process
}


def table_module(path: str) -> bool:
    """A table's module (analysis/tables/<name>.py): light at import, since the registry reads its
    declaration on every command (`harness --help` too), so its computing functions import what they
    compute with; tests/test_declared_tables.py checks that importing them all loads no pandas or numpy."""
    folder, _, name = path.rpartition("/")
    return folder == "analysis/tables" and name not in ("__init__.py", "table.py", "stats_format.py")


def inner_imports() -> list[tuple[str, str]]:
    """(file, module) of each import of our own modules inside a function."""
    found = []
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for fn in ast.walk(tree):
                if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                for node in ast.walk(fn):
                    if isinstance(node, ast.ImportFrom) and (
                        node.level or (node.module or "").split(".")[0] in PACKAGES
                    ):
                        found.append((str(path.relative_to(REPO)), "." * node.level + (node.module or "")))
                    elif isinstance(node, ast.Import) and node.names[0].name.split(".")[0] in PACKAGES:
                        found.append((str(path.relative_to(REPO)), node.names[0].name))
    return found


def test_imports_of_our_modules_sit_at_the_top() -> None:
    """A file's top shows what it uses: an import inside a function is in a table's module, or one of the
    few known ones."""
    found = [(f, m) for f, m in inner_imports() if not table_module(f)]
    assert set(found) == LAZY_IMPORTS, "new in-function imports: " + ", ".join(
        f"{f}: {m}" for f, m in sorted(set(found) - LAZY_IMPORTS)
    )
    assert len(found) <= 15
