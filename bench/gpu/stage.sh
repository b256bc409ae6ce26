#!/usr/bin/env bash
# Stage what bench/gpu/check.sh needs on a GPU machine that reaches no network, in .gpu/
# (git-ignored; GPU_STAGE names another folder, as the test of this check does), and say how it
# travels (the device tool sends at most 64 MiB a call).
#
#   bench/gpu/stage.sh            after scripts/bootstrap.sh test (and bench/gpu/build-cuda.sh)
#
# .gpu/wheels/   Python 3.12 wheels of Hearth's runtime dependencies that the GPU machine's
#                image lacks (bench/gpu/wheel_list.py: the closure of Hearth's requirements
#                minus device-packages.txt), at the versions this checkout's .venv resolved (so
#                the GPU runs the code CI tests); the rest comes from the image (numpy, pillow...).
# .gpu/cuda/     ggml-python and llama-cpp-python built with CUDA (bench/gpu/build-cuda.sh).
# .gpu/vision/   a tiny random Gemma 3 with its vision tower (transformers + llama.cpp's own
#                converter, hearth_gemma3.testing) in Ollama's one-file layout,
#                and an image to ask about.
# .gpu/model-N/  the default model (Gemma 3 270M Q4_K_M, 253 MB) in pieces of 50 MiB:
#                it cannot travel in one call, so each piece goes with a call of its own
#                (carry [".gpu/model-N"], command `true`) before the check; check.sh joins them
#                and verifies the sha256 in .gpu/model-1/model.sha256. Without them, the check runs on a model
#                written there with the gguf writer (same shape, random weights).
set -euo pipefail
cd "$(dirname "$0")/../.."
py=.venv/bin/python
[ -x "$py" ] || { echo "stage: run scripts/bootstrap.sh test first" >&2; exit 1; }
stage="${GPU_STAGE:-.gpu}"
export GPU_STAGE="$stage"
mkdir -p "$stage/wheels" "$stage/vision"

# 1. wheels: Hearth's runtime needs the image lacks, at this venv's versions (wheel_list.py)
mapfile -t pins < <("$py" bench/gpu/wheel_list.py)
rm -f "$stage"/wheels/*.whl
"$py" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d "$stage/wheels" "${pins[@]}"

# 2. the tiny vision model and an image
"$py" - <<'EOF'
import os
import shutil
from pathlib import Path

from hearth.plugins.testing import sample_images
from hearth_gemma3.testing import build_tiny_gemma3_vision

work = Path(os.environ["GPU_STAGE"], "build", "gemma3v")
files = build_tiny_gemma3_vision(work)
out = Path(os.environ["GPU_STAGE"], "vision")
shutil.copyfile(files.ollama, out / "ollama.gguf")
name, data = next(iter(sample_images().items()))
(out / "image.png").write_bytes(data)
print(f"stage: tiny vision model {files.ollama.stat().st_size} bytes, image {name}")
EOF

# 3. the default model, in pieces
model="$("$py" -c 'from hearth.default_model import default_model_path; print(default_model_path())')"
rm -rf "$stage"/model-*
split -b 50M -d -a 1 "$model" "$stage/piece-"
for piece in "$stage"/piece-*; do
    n="${piece##*-}"
    mkdir -p "$stage/model-$((n + 1))"
    mv "$piece" "$stage/model-$((n + 1))/part"
done
sha256sum "$model" | cut -d' ' -f1 > "$stage/model-1/model.sha256"

# 4. what travels with each call
tree=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
echo "stage: the working tree is $((tree >> 20)) MiB; the check's call carries:"
carried=("$stage/wheels" "$stage/vision")
[ -d "$stage/cuda" ] && carried+=("$stage/cuda")  # build-cuda.sh's wheels, once built
du -sb "${carried[@]}"
total=$((tree + $(du -cb "${carried[@]}" | tail -1 | cut -f1)))
echo "stage: total $((total >> 20)) MiB of 64"
[ "$total" -lt $((64 << 20)) ] || { echo "stage: over the 64 MiB a call may carry" >&2; exit 1; }
for d in "$stage"/model-*; do echo "stage: $d: $(( $(du -sb "$d" | cut -f1) >> 20 )) MiB (a call of its own)"; done
