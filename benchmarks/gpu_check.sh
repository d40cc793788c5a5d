#!/usr/bin/env bash
# The ONE script that runs every GPU check and benchmark (DESIGN §5, levels L4 and L5):
# gpu-marked tests, compute-sanitizer memcheck and racecheck, kernel benchmarks against the
# anchors, the fused example; JSON under benchmarks/results/, a summary table printed last.
#
#   bash benchmarks/gpu_check.sh            # on a machine with the GPU
#   bash benchmarks/gpu_check.sh --build    # only compile (works without a GPU; nvcc needed)
#   bash benchmarks/gpu_check.sh --only peers   # one phase (or --skip a,b)
set -euo pipefail
cd "$(dirname "$0")/.."
# the package and its entry points (every plugin arrives through them), from this tree, offline
python3 -c "import importlib.metadata as m; m.distribution('grid-rbd')" 2>/dev/null \
    || python3 -m pip install -q --no-deps --no-build-isolation -e . --root-user-action=ignore
# the peers phase's MJX: on the offline GPU machine from the wheels carried in .whl/ (mujoco,
# mujoco-mjx, trimesh for Python 3.12; see benchmarks/peers.py), into a directory of its own
if [ -d .whl ] && ! python3 -c "import mujoco.mjx" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/grid-peers-site .whl/*.whl
    export PYTHONPATH="/tmp/grid-peers-site${PYTHONPATH:+:$PYTHONPATH}"
fi
exec python3 benchmarks/gpu_check.py "$@"
