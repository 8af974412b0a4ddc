#!/usr/bin/env bash
# There (the GPU host): the decode attention's A/B measurement (kernels/cuda/NOTES.md, decattn2).
# Builds the committed snapshot (here: prepare.sh --src-only first) and runs cuda_decode_bench
# --attn-bench for the register kernel, the stream kernel and a few of its shapes, and the SIMT
# kernel at 1 and 8 rows, then the decode-attention GPU tests and the runner goldens; logs in $OUT.
# Usage: run(command="OUT=$OUT scripts/device/attn_bench.sh", carry=[".device"], timeout_s=600)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/vvout}
mkdir -p "$OUT"
t0=$SECONDS
scripts/device/host_build.sh unit_kernels_cuda cuda_decode_bench >"$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
echo "build $((SECONDS - t0))s: $(tail -1 "$OUT/build.log")"
. scripts/device/host_env.sh
B=/tmp/vvbuild/tests
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used,temperature.gpu --format=csv >"$OUT/gpu.txt" 2>&1
bench() {  # label env...
  local label=$1; shift
  echo "== $label" >>"$OUT/attn.log"
  env "$@" timeout 90 $B/cuda_decode_bench --attn-bench >>"$OUT/attn.log" 2>&1 || echo "bench $label rc=$?"
}
# Before the tests: figures first, should the tests run long.
bench regs VV_CUDA_MMA_DECODE=regs
bench stream VV_CUDA_MMA_DECODE=stream
bench stream-s4 VV_CUDA_MMA_DECODE=stream VV_CUDA_MMA_DECODE_STAGES=4
bench stream-w2 VV_CUDA_MMA_DECODE=stream VV_CUDA_MMA_DECODE_WARPS=2
bench stream-w1 VV_CUDA_MMA_DECODE=stream VV_CUDA_MMA_DECODE_WARPS=1
bench stream-c128 VV_CUDA_MMA_DECODE=stream VV_CUDA_MMA_DECODE_CHUNK=128
echo "== simt" >>"$OUT/attn.log"
VV_CUDA_DECODE_ATTN=simt timeout 60 $B/cuda_decode_bench --attn-bench --attn-rows 1,8 >>"$OUT/attn.log" 2>&1
grep -E "^==|^attn " "$OUT/attn.log"
t1=$SECONDS
VV_REQUIRE_GPU=1 timeout 300 $B/unit_kernels_cuda --gtest_filter='CudaDecode*:CudaRunnerGolden*' >"$OUT/tests.log" 2>&1
echo "tests rc=$? $((SECONDS - t1))s"
grep -E "^\[  PASSED|^\[  FAILED|^\[       OK|Failure|error" "$OUT/tests.log" | head -40
echo "total $((SECONDS - t0))s"
