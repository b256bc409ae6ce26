#!/usr/bin/env bash
# The GPU check, one command on a lent GPU machine (bench/gpu/README.md says how to stage and
# call it): installs Hearth and the carried wheels, then runs bench/gpu/check.py, which writes
# $OUT/report.json; the log is $OUT/check.log.
#
#   bash bench/gpu/check.sh              on the GPU machine (OUT set by the device tool)
#   bash bench/gpu/check.sh --smoke      there, first: install, then a short check on a model
#                                        written there (devices, parity, speed), ~1 minute
#   bash bench/gpu/check.sh --diagnose   there: small models' forward passes on the GPU against
#                                        the CPU (diagnose.py), each fault named by its op, and
#                                        compute-sanitizer on the first case that fails
#   bash bench/gpu/check.sh --dry-run    here: every step that needs no GPU (test_gpu_check.py)
#
# Time plan on an H100/H200 (16 cores): install ~30 s, model join ~2 s, service and checks
# 3-5 min (each offload setting loads the model once per step); no compiling: the CUDA
# wheels were built on a CPU machine by build-cuda.sh. Budget 8 minutes; a second try fits.
set -uo pipefail
cd "$(dirname "$0")/../.."
repo="$(pwd)"
dry=0
smoke=0
diagnose=0
[ "${1:-}" = "--dry-run" ] && dry=1
[ "${1:-}" = "--diagnose" ] && diagnose=1
[ "${1:-}" = "--smoke" ] && smoke=1
stage="${GPU_STAGE:-.gpu}"  # what stage.sh staged (another folder: the test of this check)
OUT="${OUT:-$repo/$stage/out}"
mkdir -p "$OUT"
log="$OUT/check.log"
exec > >(tee -a "$log") 2>&1
say() { echo "[check $(date +%H:%M:%S)] $*"; }
say "repo $repo, dry run $dry"

if [ "$dry" = 1 ]; then
    python=.venv/bin/python
    [ -x "$python" ] || { say "no .venv: run scripts/bootstrap.sh test first"; exit 1; }
else
    python="$(command -v python3)"
    # The wheels are installed once per machine (a later call on the same machine finds them).
    site=/tmp/hearth-site
    wheels=("$stage"/wheels/*.whl "$stage"/cuda/*.whl)
    stamp="$(ls -l "${wheels[@]}" | sha256sum | cut -d' ' -f1)"
    if [ "$(cat "$site/.stamp" 2>/dev/null)" != "$stamp" ]; then
        rm -rf "$site" && mkdir -p "$site"
        say "installing ${#wheels[@]} wheels into $site"
        "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$site" "${wheels[@]}" || { say "wheel install failed"; exit 1; }
        echo "$stamp" > "$site/.stamp"
    fi
    export PYTHONPATH="$site"
    # Hearth itself from this tree (its C kernels compile here, for this CPU)
    "$python" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir \
        --upgrade --target "$site" . || { say "Hearth install failed"; exit 1; }
    # cuBLAS and the CUDA runtime the wheels link against (the toolkit's, else the image's
    # PyTorch's nvidia/cu13/lib), and the driver's libcuda where ld.so may not look
    libs="$("$python" - <<'EOF'
import glob, os, site
dirs = ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib",
        "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib"]
for root in site.getsitepackages():
    dirs += glob.glob(os.path.join(root, "nvidia", "*", "lib"))
wanted = ("libcublas.so.*", "libcudart.so.*", "libcuda.so.1")
keep = [d for d in dirs if any(glob.glob(os.path.join(d, w)) for w in wanted)]
print(":".join(dict.fromkeys(keep)))
EOF
)"
    export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    nvidia-smi || say "nvidia-smi failed"
    say "$("$python" --version), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), gcc: $(command -v gcc || echo none)"
fi
"$python" -c "import ggml, hearth; print('ggml', ggml.__file__)" || { say "hearth does not import"; exit 1; }

if [ "$diagnose" = 1 ]; then
    PYTHONUNBUFFERED=1 "$python" bench/gpu/diagnose.py "$OUT/diagnose"
    [ -n "${NO_SANITIZER:-}" ] && exit 0
    for case in runner-pipelined runner-serial synthetic-all gemma3-all llama-all gemma3-blocks; do
        if "$python" -c "import json,sys; sys.exit(json.load(open('$OUT/diagnose/diagnose.json'))['$case']['status'] == 0)"; then
            say "compute-sanitizer on $case"
            timeout 90 compute-sanitizer --tool memcheck --print-limit 5 "$python" bench/gpu/diagnose.py \
                --case "$case" /tmp/hearth-diagnose-models > "$OUT/sanitizer.log" 2>&1
            grep -m 40 -E "=========|Invalid|at 0x|by thread|Address|Saved host backtrace|in |ggml" "$OUT/sanitizer.log" | head -60
            break
        fi
    done
    exit 0
fi

# The model: the default model joined from its carried pieces, else the installed default
# model (the CPU machine), else one written here.
model=""
if [ "$smoke" = 1 ]; then
    :  # the synthetic model below
elif ls "$stage"/model-*/part >/dev/null 2>&1; then
    model=/tmp/hearth-default-model.gguf
    cat $(ls -d "$stage"/model-* | sort -t- -k2 -n | sed 's|$|/part|') > "$model"
    if [ "$(sha256sum "$model" | cut -d' ' -f1)" != "$(cat "$stage/model-1/model.sha256")" ]; then
        say "the default model's pieces do not join to its sha256 (a piece missing?)"
        ls -la "$stage"/model-*
        model=""
    fi
fi
if [ -z "$model" ]; then
    model="$("$python" -c 'from hearth.default_model import default_model_path as p; print(p())' 2>/dev/null || true)"
    [ -f "$model" ] || model=""
fi
if [ -z "$model" ]; then
    model=/tmp/hearth-synthetic.gguf
    say "default model not carried: writing a synthetic Gemma-3-270M-shaped model"
    "$python" bench/gpu/synthetic.py "$model" || exit 1
fi
say "model $model ($(stat -c %s "$model") bytes)"

vision=()
[ -f "$stage/vision/ollama.gguf" ] && vision=(--vision "$stage/vision")
extra=()
[ "$dry" = 1 ] && extra=(--dry-run)
[ "$smoke" = 1 ] && extra=(--dry-run --steps devices,parity,speed)
# CHECK_ARGS: more options for check.py (e.g. "--shapes llama3.2-1b" or "--steps speed")
# shellcheck disable=SC2086
PYTHONUNBUFFERED=1 "$python" bench/gpu/check.py --model "$model" --out "$OUT" "${vision[@]}" "${extra[@]}" ${CHECK_ARGS:-}
status=$?
say "done, status $status"
exit $status
