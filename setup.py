"""Builds Hearth's C extensions; everything else about the package is in pyproject.toml.

`hearth.engine.ml._kernels` (quantized matrix products, app/engine/ml/ggml_kernels.py) and
`hearth.engine.ml._attention` (encoders' F32 attention, app/engine/ml/ggml_attention.py) are
CPU kernels loaded through ctypes. They are optional: where one does not compile, Hearth uses
ggml's own kernels instead.
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
        ),
        Extension(
            "hearth.engine.ml._attention",
            sources=["app/engine/ml/_attention.c"],
            extra_compile_args=flags,
            optional=True,
        ),
    ]
)
