#!/usr/bin/env bash
# Run the test suite as on a CPU without AVX-512, on any x86-64 machine with AVX2:
# ggml (ggml-python) and llama.cpp (llama-cpp-python) are built for AVX2/FMA/F16C only into
# .venv-avx2 (the first run compiles both: about 15 minutes on two cores), and Hearth's own CPU
# kernels keep to their AVX2 code (HEARTH_CPU_KERNELS=avx2). Arguments go to pytest.
#   scripts/test-avx2-only.sh -q                 the whole suite
#   scripts/test-avx2-only.sh tests/engine -q    a part
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
avx2="-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
avx2="$avx2 -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF"
avx2="$avx2 -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF"
HEARTH_VENV=.venv-avx2 CMAKE_ARGS="$avx2" scripts/bootstrap.sh test
py=.venv-avx2/bin/python
# Refuse to report an AVX2-only run from a build that has AVX-512 in it.
"$py" - <<'PY'
import sys
import ggml
if ggml.ggml_cpu_has_avx512() or not ggml.ggml_cpu_has_avx2():
    sys.exit("test-avx2-only: ggml in .venv-avx2 is not an AVX2-only build; remove .venv-avx2")
print("test-avx2-only: ggml built for AVX2 without AVX-512", file=sys.stderr)
PY
export HEARTH_CPU_KERNELS=avx2
exec "$py" -m pytest "$@"
