"""A pytest plugin that has the tests read Kineto pieces with the C reader built under AddressSanitizer and
UBSan (`make asan` builds it apart, at KINETO_ASAN_MODULE, and runs the C reader's tests with
`-p kineto_asan`): loaded as analysis.readers._kineto_fast before anything imports the reader, so that no
test reads a piece with the module built in place."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from typing import Any

NAME = "analysis.readers._kineto_fast"
PATH = os.environ["KINETO_ASAN_MODULE"]
if NAME in sys.modules:
    raise RuntimeError(f"{NAME} was imported before the plugin: load it with -p kineto_asan")
_loader = importlib.machinery.ExtensionFileLoader(NAME, PATH)
_spec = importlib.util.spec_from_file_location(NAME, PATH, loader=_loader)
assert _spec is not None
MODULE = importlib.util.module_from_spec(_spec)
_loader.exec_module(MODULE)
sys.modules[NAME] = MODULE


def pytest_report_header(config: Any) -> str:
    return f"the C reader under AddressSanitizer and UBSan: {PATH}"


def pytest_sessionstart(session: Any) -> None:
    import analysis.readers.kineto_columns as columns
    import analysis.readers.kineto_pool as pool

    assert columns._kineto_fast is MODULE and pool._kineto_fast is MODULE, (
        "the tests would read the other build"
    )
