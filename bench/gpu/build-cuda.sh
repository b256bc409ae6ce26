#!/usr/bin/env bash
# Build CUDA wheels of ggml-python and llama-cpp-python for ONE GPU architecture, on a machine
# with no GPU (nvcc is enough), so that a lent GPU machine spends its minutes checking, not
# compiling. Writes them to .gpu/cuda/ (git-ignored), which bench/gpu/check.sh installs from.
#
#   bench/gpu/build-cuda.sh [ARCH] [which]     ARCH: CMake CUDA architecture (90-real: H100/H200)
#                                              which: ggml | llama | both (default both)
#   bench/gpu/build-cuda.sh --configure-only [ARCH]
#       CMake-configures ggml's CUDA build (nvcc compiles CMake's test program for ARCH) and
#       stops: what bench/gpu/test_gpu_check.py runs. cuBLAS and libcuda are stubs there,
#       as only linking needs them.
#   bench/gpu/build-cuda.sh --record
#       rewrites bench/gpu/cuda-build.json (committed: what was built, how long it took, the
#       wheels' sizes and sha256) from .gpu/cuda/; every build ends with it.
#
# Needs: nvcc (CUDA 12.8+/13; `nvidia-cuda-nvcc` from PyPI or a CUDA install; CUDA_HOME or
# /usr/local/cuda), a C/C++ compiler, CMake, and PyPI for nvidia-cublas (headers and the
# library to link against; the GPU machine has its own at run time) and the build backends.
# No GPU and no CUDA driver are needed: libcuda is linked against a stub made here, and the
# real driver library is found when the wheel runs on the GPU machine.
#
# Both builds match Hearth's CPU build (bootstrap.sh: llamafile sgemm on, ggml's own thread
# pool, RPC) and add CUDA for ARCH only, with CUDA graphs on (as llama.cpp builds; ggml's own
# default is off). They differ from it in two ways: the CPU backend is built for AVX2 (not
# -march=native: the GPU machine's CPU is not this one), and without flash-attention CUDA
# kernels (GGML_CUDA_FA=OFF, a large share of the compile; Hearth and this check run with
# flash attention off, and ggml computes that op on the CPU when asked).
# llama.cpp's source is the llama-cpp-python sdist trimmed of what its build does not read
# (vocab files, docs, tests): 76 MB -> about 12 MB, so it could also travel and build there.
set -euo pipefail
cd "$(dirname "$0")/../.."
configure_only=0
record_only=0
if [ "${1:-}" = "--configure-only" ]; then configure_only=1; shift; fi
if [ "${1:-}" = "--record" ]; then record_only=1; shift; fi
arch="${1:-90-real}"
which="${2:-both}"
out="${GPU_STAGE:-.gpu}/cuda"
work="${GPU_STAGE:-.gpu}/build"
mkdir -p "$out" "$work"
python="${PYTHON:-$(command -v python3)}"
case "$python" in /*) ;; *) python="$PWD/$python" ;; esac

# The toolkit: a folder with bin/nvcc and include/cuda_runtime.h (CUDA_HOME, else the usual one)
cuda_home=""
for dir in ${CUDA_HOME:-} /usr/local/cuda /opt/cuda; do
    if [ -x "$dir/bin/nvcc" ] && [ -f "$dir/include/cuda_runtime.h" ]; then cuda_home="$dir"; break; fi
done
[ -n "$cuda_home" ] || { echo "build-cuda: no CUDA toolkit found (set CUDA_HOME to the folder holding bin/nvcc)" >&2; exit 2; }

record() {
    "$python" - "$out" bench/gpu/cuda-build.json <<'EOF2'
import hashlib, json, platform, sys, time
from pathlib import Path

out, dest = Path(sys.argv[1]), Path(sys.argv[2])
times = {}
for line in (out / "build-times.txt").read_text().splitlines() if (out / "build-times.txt").exists() else []:
    name, arch, seconds, _s, _on, cores, *_ = line.split()
    times[name] = {"arch": arch, "seconds": int(seconds), "cores": int(cores)}
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
wheels = [
    {"file": w.name, "bytes": w.stat().st_size, "sha256": hashlib.sha256(w.read_bytes()).hexdigest()}
    for w in sorted(out.glob("*.whl"))
]
record = {"built": time.strftime("%Y-%m-%d", time.gmtime()), "cpu": cpu, "builds": times, "wheels": wheels}
dest.write_text(json.dumps(record, indent=1) + "\n")
print(f"build-cuda: wrote {dest}: {sum(w['bytes'] for w in wheels) >> 20} MiB of wheels", file=sys.stderr)
EOF2
}
if [ "$record_only" = 1 ]; then record; exit 0; fi

stub() {  # stub FILE SONAME [HEADER]: a library with that soname, defining every cuXxx
    # function HEADER declares (so the linker records the soname: with no symbols it would be
    # dropped as unneeded, and the driver's functions left unresolved at load)
    if [ -n "${3:-}" ]; then
        grep -ohE '\bcu[A-Z][A-Za-z0-9_]*\b' "$3" | sort -u | sed 's/.*/void &(void) {}/' > "$work/stub.c"
    else
        echo 'void hearth_stub(void) {}' > "$work/stub.c"
    fi
    cc -shared -fPIC -o "$1" "$work/stub.c" -Wl,-soname,"$2"
}

# A toolkit folder CMake's FindCUDAToolkit accepts: the compiler's own tree, plus cuBLAS from
# PyPI and a libcuda stub (a soname only; the driver provides the symbols at run time).
tk="$work/cuda-toolkit"
[ "$configure_only" = 1 ] && tk="$work/cuda-toolkit-stubs"
if [ ! -e "$tk/.complete" ]; then
    rm -rf "$tk" && mkdir -p "$tk"
    cp -a "$cuda_home/." "$tk/"
    libdir="$tk/lib64"; [ -d "$libdir" ] || libdir="$tk/lib"
    if [ "$configure_only" = 1 ]; then
        for lib in cublas cublasLt; do stub "$libdir/lib$lib.so" "lib$lib.so.13"; done
    else
        "$python" -m pip download --quiet --no-deps --only-binary=:all: -d "$work/dl" "nvidia-cublas>=13,<14"
        rm -rf "$work/cublas" && mkdir -p "$work/cublas"
        (cd "$work/cublas" && "$python" -m zipfile -e "$(ls ../dl/nvidia_cublas-*.whl | head -1)" .)
        cublas="$(dirname "$(find "$work/cublas" -name 'libcublas.so.*' | head -1)")"
        cp -a "$cublas"/. "$libdir/"
        cp -a "$cublas/../include/." "$tk/include/"
        for lib in cublas cublasLt; do ln -sf "lib$lib.so.13" "$libdir/lib$lib.so"; done
    fi
    mkdir -p "$libdir/stubs"
    stub "$libdir/stubs/libcuda.so" libcuda.so.1 "$tk/include/cuda.h"
    touch "$tk/.complete"
fi
tk="$(cd "$tk" && pwd)"

common="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$arch -DCUDAToolkit_ROOT=$tk \
-DCMAKE_CUDA_COMPILER=$tk/bin/nvcc -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF \
-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
-DGGML_LLAMAFILE=ON -DGGML_OPENMP=OFF -DGGML_RPC=ON -DGGML_CUDA_GRAPHS=ON"
jobs="$(nproc)"

if [ "$configure_only" = 1 ]; then
    pin="$(grep -o '"ggml-python==[^"]*"' pyproject.toml | tr -d '"')"
    "$python" -m pip download --quiet --no-deps --no-binary=:all: -d "$work/dl" "$pin"
    src="$work/ggml-src"
    rm -rf "$src" "$work/configure" && mkdir -p "$src"
    tar -xzf "$(ls "$work"/dl/ggml_python-*.tar.gz | head -1)" -C "$src" --strip-components=1
    # shellcheck disable=SC2086 # $common is a list of -D flags
    cmake -S "$src/vendor/ggml" -B "$work/configure" $common >"$work/configure.log" 2>&1 \
        || { tail -n 30 "$work/configure.log" >&2; exit 1; }
    grep -E "CUDA (found|Toolkit found)|CMAKE_CUDA_ARCHITECTURES|CUDA host compiler" "$work/configure.log" >&2 || true
    echo "build-cuda: ggml's CUDA build configures for sm $arch" >&2
    exit 0
fi

build() {  # build NAME SOURCE EXTRA_CMAKE_ARGS
    local name="$1" source="$2" extra="$3" start end
    start=$(date +%s)
    echo "build-cuda: $name for sm $arch with $jobs jobs..." >&2
    CMAKE_ARGS="$common $extra" CMAKE_BUILD_PARALLEL_LEVEL="$jobs" \
        "$python" -m pip wheel --no-deps --no-cache-dir -w "$out" "$source" >"$work/$name.log" 2>&1 \
        || { tail -n 40 "$work/$name.log" >&2; exit 1; }
    "$python" bench/gpu/slim_wheel.py "$out"/*.whl
    end=$(date +%s)
    echo "$name $arch $((end - start)) s on $jobs cores" | tee -a "$out/build-times.txt" >&2
}

if [ "$which" != llama ]; then
    pin="$(grep -o '"ggml-python==[^"]*"' pyproject.toml | tr -d '"')"
    "$python" -m pip download --quiet --no-deps --no-binary=:all: -d "$work/dl" "$pin"
    rm -f "$out"/ggml_python-*.whl
    build ggml-python "$(ls "$work"/dl/ggml_python-*.tar.gz | head -1)" ""
fi

if [ "$which" != ggml ]; then
    pin="$(grep -o '"llama-cpp-python==[^"]*"' pyproject.toml | tr -d '"')"
    "$python" -m pip download --quiet --no-deps --no-binary=:all: -d "$work/dl" "$pin"
    src="$work/llama-src"
    rm -rf "$src" && mkdir -p "$src"
    tar -xzf "$(ls "$work"/dl/llama_cpp_python-*.tar.gz | head -1)" -C "$src" --strip-components=1
    v="$src/vendor/llama.cpp"
    rm -rf "$v/models" "$v/docs" "$v/tests" "$v/benches" "$v/examples" "$v/media" "$v/gguf-py/tests"
    # llama.cpp's CMake adds tests and examples only when asked; tools/ holds libmtmd.
    rm -f "$out"/llama_cpp_python-*.whl
    build llama-cpp-python "$src" "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
fi
record
ls -la "$out" >&2
