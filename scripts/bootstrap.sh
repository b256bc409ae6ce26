#!/usr/bin/env bash
# Create .venv in the repository root and install Hearth into it (editable), idempotently.
# Usage: scripts/bootstrap.sh [extras]      e.g. scripts/bootstrap.sh test
# HEARTH_VENV names another venv folder (scripts/test-avx2-only.sh builds .venv-avx2).
# The first run compiles ggml (ggml-python) and llama.cpp (llama-cpp-python, the compatibility
# engine, a runtime dependency): about 8-10 minutes on two cores. Later runs return at once unless pyproject.toml, setup.py or the C
# kernel (app/engine/ml/_kernels.c) changed.
# GPU builds: export CMAKE_ARGS="-DGGML_CUDA=on" before the first run.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python="${PYTHON:-python3}"
venv="${HEARTH_VENV:-.venv}"

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
stamp="$venv/.hearth-install-stamp"
want="$(cat pyproject.toml setup.py app/engine/ml/_kernels.c scripts/bootstrap.sh | sha256sum | cut -d' ' -f1) extras=${extras}"
have="$(cat "$stamp" 2>/dev/null || true)"
# An install with the test extras also satisfies a plain install.
if [ "$have" = "$want" ] || { [ -z "$extras" ] && [ "$have" = "${want% extras=*} extras=test" ]; }; then
    exit 0
fi

echo "hearth: setting up $venv (the first run compiles ggml; this takes a few minutes)..." >&2
log="$venv/install.log"
target="."
[ -n "$extras" ] && target=".[${extras}]"
# ggml-python is built first, with llama.cpp's llamafile sgemm kernels on (stock ggml has them
# off; on, both engines run the same CPU matrix kernels) and ggml's own thread pool instead of
# OpenMP (with OpenMP, computing from the runner's worker thread is a third slower).
# GGML_RPC=ON adds ggml's RPC backend: other machines' devices (`hearth worker`, HEARTH_RPC_SERVERS).
# llama.cpp is built next, with its defaults, its multimodal library (libmtmd) included: the
# tests compare text models with llama.cpp and Gemma 3's image encoder with libmtmd
# (llama_cpp.mtmd_cpp), and bench/vision_encode.py times it. No wheel cache: pip's cache
# ignores CMAKE_ARGS, so a cached CPU build would hide a later GPU build.
ggml_pin="$(grep -o '"ggml-python==[^"]*"' pyproject.toml | tr -d '"')"
if ! { "$venv/bin/python" -m pip install --upgrade pip setuptools wheel &&
       CMAKE_ARGS="-DGGML_LLAMAFILE=ON -DGGML_OPENMP=OFF -DGGML_RPC=ON ${CMAKE_ARGS:-}" \
           "$venv/bin/python" -m pip install --no-cache-dir "$ggml_pin" &&
       "$venv/bin/python" -m pip install --no-cache-dir --editable "$target"; } >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "hearth: set-up failed; the whole log is in $log" >&2
    exit 1
fi
echo "$want" > "$stamp"
echo "hearth: set-up done" >&2
