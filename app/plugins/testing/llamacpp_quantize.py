"""llama.cpp's `llama_model_quantize` (what `llama-quantize` runs) as an oracle, in its own
process: never import llama_cpp next to Hearth's ggml, and never import this file from
Hearth (run it as a script).

Usage: python llamacpp_quantize.py IN.gguf OUT.gguf FTYPE [THREADS]

FTYPE is a llama.cpp file type name without its prefix (`Q4_K_M`, `Q8_0`, `F16`), run with
`llama_model_quantize_default_params()`. Exit status 1 with llama.cpp's log on stderr when it
fails.
"""

from __future__ import annotations

import sys


def main() -> None:
    import llama_cpp

    src, dst, ftype = sys.argv[1:4]
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype.upper()}")
    if len(sys.argv) > 4:
        params.nthread = int(sys.argv[4])
    status = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params)
    if status != 0:
        sys.exit(f"llama_model_quantize failed ({status}) on {src}")


if __name__ == "__main__":
    main()
