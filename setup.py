"""The project's one compiled module, the Kineto reader in C (the rest of the build is in pyproject.toml).

Optional: where it cannot be compiled (no C compiler, no Python headers) the install goes on and msgspec
reads every piece of a trace, the same columns at about three times the CPU (docs/performance.md, "Kineto
traces"). Declared here, not in pyproject.toml, where setuptools still calls the table experimental.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "analysis.readers._kineto_fast",
            ["analysis/readers/_kineto_fast.c"],
            depends=[
                "analysis/readers/_kineto_event.h",
                "analysis/readers/_kineto_json.h",
                "analysis/readers/_kineto_store.h",
            ],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
