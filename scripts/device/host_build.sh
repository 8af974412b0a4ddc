#!/usr/bin/env bash
# There: configures and builds $VV_SRC (see host_env.sh) for sm_90a into /tmp/vvbuild with ninja.
# Usage: scripts/device/host_build.sh [target ...]   (default: the gpu tests and the benches)
set -euo pipefail
. "$(dirname "$0")/host_env.sh"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(unit_kernels_cuda gpu_full_golden cuda_decode_bench engine_loop_bench)
ninja_bin=$(command -v ninja || true)
gen=(-G Ninja)
[ -n "$ninja_bin" ] || gen=()
cmake -S "$VV_SRC" -B /tmp/vvbuild "${gen[@]}" -U '__pkg_config_*' -DCMAKE_BUILD_TYPE=Release -DVV_WITH_CUDA=ON \
  -DVV_CUDA_ARCHS=90a -DCMAKE_CUDA_ARCHITECTURES=90a >/tmp/vvbuild.configure.log 2>&1 ||
  { tail -40 /tmp/vvbuild.configure.log; exit 1; }
cmake --build /tmp/vvbuild -j 16 --target "${targets[@]}" >/tmp/vvbuild.log 2>&1 ||
  { grep -m20 -B2 -A8 "error" /tmp/vvbuild.log; tail -20 /tmp/vvbuild.log; exit 1; }
echo "built ${targets[*]} from $(cat "$VV_DEV/src.rev" 2>/dev/null || echo 'the working tree')"
