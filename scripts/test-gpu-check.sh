#!/usr/bin/env bash
# The GPU check's own test (bench/gpu/test_gpu_check.py), apart from the product suite: it
# stages the check for real (wheels downloaded from PyPI, the tiny vision model built, the
# default model cut in pieces) and runs it end to end on the CPU, minutes and network. What it
# stages goes to a temporary folder, not to .gpu/. Arguments go to pytest.
#
#   scripts/test-gpu-check.sh -q
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
"$here/scripts/bootstrap.sh" test
cd "$here"
exec .venv/bin/python -m pytest bench/gpu/test_gpu_check.py "$@"
