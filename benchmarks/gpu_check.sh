#!/usr/bin/env bash
# The ONE script that runs every GPU check and benchmark (DESIGN §5, levels L4 and L5):
# gpu-marked tests, compute-sanitizer memcheck and racecheck, kernel benchmarks against the
# anchors, the fused example; JSON under benchmarks/results/, a summary table printed last.
#
#   bash benchmarks/gpu_check.sh            # on a machine with the GPU
#   bash benchmarks/gpu_check.sh --build    # only compile (works without a GPU; nvcc needed)
set -euo pipefail
cd "$(dirname "$0")/.."
# the package and its entry points (every plugin arrives through them), from this tree, offline
python3 -c "import importlib.metadata as m; m.distribution('grid-rbd')" 2>/dev/null \
    || python3 -m pip install -q --no-deps --no-build-isolation -e . --root-user-action=ignore
exec python3 benchmarks/gpu_check.py "$@"
