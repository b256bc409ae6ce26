"""Make llama.cpp load weights in their plain layouts (no CPU repacking).

llama.cpp's repacked Q4_K kernels round a row differently in a batch than alone, so Hearth
does not use them (see hearth.engine.ml.weights); with this, both run the same kernels.
"""

from __future__ import annotations


def use_plain_layouts() -> None:
    import llama_cpp

    default_params = llama_cpp.llama_cpp.llama_model_default_params

    def plain_params():  # type: ignore[no-untyped-def]
        params = default_params()
        params.use_extra_bufts = False
        return params

    llama_cpp.llama_cpp.llama_model_default_params = plain_params
