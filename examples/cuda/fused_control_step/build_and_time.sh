#!/usr/bin/env bash
# Generate the header (iiwa14, inverse dynamics only), build the fused example, run it.
#   bash examples/cuda/fused_control_step/build_and_time.sh [--header PATH] [--batch N] [--repeats R]
#                                                           [--threads T] [--json PATH]
# The architecture comes from GRID_CUDA_ARCH, else the GPU (nvidia-smi), else sm_90.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${GRID_EXAMPLE_BUILD:-$(mktemp -d)}"
header=""
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --header) header="$2"; shift 2 ;;
        *) args+=("$1"); shift ;;
    esac
done
if [ -z "$header" ]; then
    header="$out/grid.cuh"
    grid build iiwa14 -a inverse_dynamics -o "$header"
fi
arch="${GRID_CUDA_ARCH:-}"
if [ -z "$arch" ] && command -v nvidia-smi >/dev/null 2>&1; then
    cc="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d '. ')"
    [ -n "$cc" ] && arch="sm_$cc"
fi
arch="${arch:-sm_90}"
case "$arch" in sm_*) ;; *) arch="sm_${arch//./}" ;; esac
nvcc -std=c++17 -O3 -arch="$arch" -DGRID_HEADER="\"$header\"" "$here/fused_control_step.cu" -o "$out/fused_control_step"
"$out/fused_control_step" "${args[@]}"
