"""Builds Hearth's one C extension; everything else about the package is in pyproject.toml.

`hearth.engine.ml._kernels` is a CPU kernel loaded through ctypes (see
app/engine/ml/ggml_kernels.py). It is optional: where it does not compile, Hearth uses
ggml's own kernels for everything.
"""

import sys

from setuptools import Extension, setup

flags = [] if sys.platform == "win32" else ["-O3"]

setup(
    ext_modules=[
        Extension(
            "hearth.engine.ml._kernels",
            sources=["app/engine/ml/_kernels.c"],
            extra_compile_args=flags,
            optional=True,
        )
    ]
)
