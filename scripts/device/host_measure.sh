#!/usr/bin/env bash
# There: builds (host_build.sh) and runs the named steps, each into $OUT/<step>.log (and .json where
# the tool prints one). Steps run in the order given; a failing step is recorded and the rest go on.
#   tests        unit_kernels_cuda, VV_REQUIRE_GPU=1 ($GTEST_FILTER narrows it; $SHARDS > 1 runs that many shards at once)
#   golden       make_golden.py --preset full (bf16 reference on the GPU, ~17 GB under /tmp) + gpu_full_golden
#   decode       cuda_decode_bench --preset 7b --bf16 (decode b1, prefill, encoders, standard job)
#   decode_attn  decode with VV_CUDA_DECODE_ATTN=simt and with VV_CUDA_MMA_DECODE=regs (no GEMM table)
#   mlpfuse      the prefill MLP fusion's gpu tests, and decode with VV_CUDA_MLP_FUSE=0 (the A/B)
#   ffnlt        the encoders' FFN on cuBLASLt: its gpu tests, then both encoders over 60 s (5 runs) by
#                default, with VV_CUDA_FFN_LT=0, with VV_CUDA_FFN_LT_MIN=128 and 512, and profiled per op
#   flashqv      flash attention with 128 query vectors per block (VV_CUDA_FLASH_QV=128): its gpu tests,
#                then the 1,024- and 4,096-row prefills with and without it
#   flashform    the flash kernel (block-table entries a tile ahead) as is and with VV_CUDA_FLASH_QV=128x2:
#                its gpu tests, the 1,024/4,096-row prefills, Nsight sections of one 4K-chunk launch of each
#   flashwg      the flash kernel's wgmma forms (VV_CUDA_FLASH_QV=wg, wgp, wgf): their gpu tests (FLASH_TESTS=0: none),
#                the prefills at $FLASH_ROWS rows (1024 4096) with each of $FLASH_FORMS (narrow wg wgp wgf wgfl),
#                Nsight sections of one 4K-chunk launch of each of $FLASH_NCU (wg wgp wgf wgfl; "none": none)
#   prefillchunk the 4,096-row prefill in chunks of 1,024, 2,048, 4,096 rows (cuda_decode_bench --chunk)
#   b1opt        batch-1 decode opt-ins ($B1_CFGS: by default none, VV_CUDA_GEMV_BULK=1, =3, VV_CUDA_ATTN_LEAN=1,
#                =3 with the lean attention; $B1_REPS rounds, interleaved, every other round in reverse order;
#                1,024-row prompt; $B1_ARGS: more arguments, e.g. --prompt 4096), after their gpu tests
#                and the one-row GEMM table with and without the bulk GEMV (B1_TABLES=0 skips those two)
#   ncugemv      Nsight Compute of the one-row GEMM table's GEMV launches (every shape: duration, DRAM
#                bytes and throughput, grid, achieved occupancy), with the default GEMV and with VV_CUDA_GEMV_BULK=1
#   curvepf      the curve's 64/128 points without and with VV_CUDA_L2_PREFETCH=1 (batched steps' o GEMM from L2),
#                and with VV_CUDA_MMA_DECODE_CHUNK=128, 256, 256 with 4 stages, 256 with 4 warps a block (the
#                batched decode attention's keys per unit: fewer units to merge, more steps a warp; at ~600 keys
#                256 × 4 puts a row's units in one block, one wave)
#   prefill4kab  the 4,096-row prefill, default against one 4,096-row chunk with VV_CUDA_ROPE_FLASH=1
#                (vibevoice bench prefills a prompt in one chunk), interleaved, $AB_REPS (2) times
#   normrope     VV_CUDA_NORM_DROP=1, VV_CUDA_ROPE_FLASH=1: their gpu tests (and the runner goldens with neither),
#                the 1,024/4,096-row prefills with neither, each, both
#   mlprows      VV_CUDA_MLP_FUSE_ROWS=2 (the MLP fusion on batched decode steps): its gpu tests, then the
#                curve's 64/128 points with the default (256) and with it
#   gemvwide     VV_CUDA_GEMV_WIDE=1 (the fused norm + q/k/v GEMV in one round): the decode gpu tests with
#                it (fused = unfused bitwise), then decode with and without it
#   fasterf      the fused FFN's fast erf (default) against erff (VV_CUDA_FFN_FAST_ERF=0): the FFN gpu tests
#                with erff, then the encoders over 60 s with each
#   encblock     the encoder block kernel (VV_CUDA_ENC_BLOCK), the wgmma FFN (VV_CUDA_FFN_WG) and the fast erf,
#                all default: the encoder gpu tests (and with erff), both encoders over 60 s with none, the
#                block kernel, the wgmma FFN, both, all three (twice, interleaved), per-op times, Nsight of
#                12 launches (≈ 6 min)
#   testsgolden  the gpu suite ($GTEST_FILTER) in $SHARDS (3) shards at once with make_golden.py --preset full
#                beside them, then gpu_full_golden (`tests golden` in about half the time)
#   lanes        both encoders over 60 s: the semantic encoder on a second stream (default) against one stream
#                (VV_CUDA_LANES=0), $AB_REPS (2) rounds
#   enccache     both encoders over 60 s (5 timed encodes each) with the allocation cache (default) against
#                VV_CUDA_ALLOC_CACHE=0, $AB_REPS (2) rounds; each run's encode times and host times in encode()
#   convgemm     VV_CUDA_CONV_GEMM (default) against =0: its gpu tests, both encoders over 60 s with each, its GEMM shapes' times
#   encalgos     both encoders over 60 s with VV_CUDA_LT_ALGOS=16 against the default
#   encshapes    per-op times of both encoders over 60 s with each GEMM's shape (VV_CUDA_PROFILE=2)
#   opprofile4k  per-op times (VV_CUDA_PROFILE=1) of the 4,096-row prefill
#   prefill4k    cuda_decode_bench's prefill at 4,096 rows (issue 11's second prefill point)
#   decode_tuned, curve_tuned  decode, and the curve's 64/128 points, with VV_CUDA_LT_ALGOS=16 (each GEMM
#                shape times the heuristic's first 16 cuBLASLt algorithms and keeps the fastest)
#   skinny       VV_CUDA_SKINNY_GEMM=1: its gpu tests, decode (GEMM table) and the curve's 64/128 points
#   stream       VV_CUDA_STREAM_GEMM: its gpu tests, the GEMM table with and without it, curve points with it
#   streamws     the warp-specialised stream GEMM: its gpu tests, the GEMM table (cuBLASLt, wgmma, ws, ws1, ws4,
#                ws12)
#   ncu          Nsight Compute sections of the stream GEMM and of cuBLASLt on gate_up at 64 rows
#   opprofile    cuda_decode_bench with VV_CUDA_PROFILE=1: per-op times of prefill, b1 decode, encoders
#   ncuprefill   Nsight Compute: each kernel's time in the 1,024-row table and the prefills
#   ncuattn      Nsight Compute sections (stalls, memory, source counters) of batch-1 decode attention launches
#                after a 1,024-row prompt
#   chain        VV_CUDA_DECODE_CHAIN=1: its gpu tests, the 7B golden with it (after testsgolden/golden in the
#                same call), batch-1 decode with each of $CHAIN_CFGS ($B1_REPS rounds, interleaved)
#   batch        batched decode steps alone (cuda_decode_bench --batch-bench): $BATCH_ROWS (1,64,128) rows at
#                $BATCH_CTX (400) positions with each of $BATCH_CFGS, against the weights + K/V bound
#   ncubatch     Nsight Compute: every kernel of 64-row decode steps ($NCU_ENV as ncudecode's)
#   ncuattn      Nsight Compute sections (warp states, memory, hot SASS) of one batched decode attention launch
#                at $ATTN_ROWS (128 64) rows, context $BATCH_CTX (400); NCU_SRC=1: its stall samples per SASS line (CSV)
#   ncugemvsec   Nsight Compute sections (speed of light, memory, occupancy, launch, warp states, scheduler) of
#                6 consecutive batch-1 decode launches of the default GEMV kernel (q/k/v, o, gate_up)
#   ncuattnb     Nsight Compute sections (stalls, memory, source counters) of the batched decode attention
#                at $BATCH_ROWS (128) rows, context $BATCH_CTX (400)
#   ncudecodebulk  ncudecode with VV_CUDA_GEMV_BULK=1
#   ncuencsrc    Nsight Compute: instruction mix, stall reasons and hot SASS of the encoders' block kernels
#                (NCU_SRC=1: also the stall samples per SASS line of one launch; 2: those alone)
#   ncuenckern   every kernel's duration, grid and block in the encoders over 60 s (Nsight Compute, clocks and
#                caches left alone; the two warm-up encodes and the timed one): which kernel cuBLASLt runs
#                for each FFN GEMM and how long each kernel takes alone (ncu_kernel_table.py sums them)
#   ktrace       every kernel of batch-1 decode steps and of batched steps ($KT_ROWS: 64,128 rows at context
#                400) as it ran in the graph (CUPTI; cuda_decode_bench --kernel-trace): what each kernel adds to
#                a step, its duration and its start under the one before (PDL); $KT_ENV: switches for all runs.
#                Runs the batch-1 trace twice, the second started before the warm-up (--kernel-trace-early,
#                in case CUPTI misses graphs captured before it starts)
#   b1ab         batch-1 decode of this snapshot against a base commit's (prepare.sh --base REV), both built here,
#                $B1_REPS rounds interleaved, every other one reversed (decode_head_rN, decode_base_rN)
#   encab        the same for both encoders over 60 s, 5 encodes a run (encab_head_rN, encab_base_rN)
#   b1inab       batch-1 decode A/B in one process (cuda_decode_bench --ab): each of $AB_CFGS against the
#                environment as it is, $AB_ROUNDS rounds of $AB_STEPS steps taking turns ($B1_ARGS: e.g. --prompt 4096;
#                '--ab-rows 64 --prompt 400': batched steps of 64 rows, the curve's full steps, instead of batch 1;
#                '--ab-rewind': every turn at the same positions, for changes whose effect depends on the length)
#   astamps      the fused one-row attention's blocks stage by stage as they ran in the graph (VV_CUDA_ATTN_STAMPS=1;
#                cuda_decode_bench's "astamp" lines): with each of $AS_CFGS (plain;VV_CUDA_ATTN_TRIG_PRE=0)
#   ncudecode    Nsight Compute: every kernel's duration, in order, of a short prefill and 12 batch-1 decode
#                tokens (the last ~175 rows are one token's kernels, each alone: the step's sum without gaps);
#                $NCU_ENV: the environment it runs with (e.g. VV_CUDA_DECODE_CHAIN=1)
#   table1k      the GEMM table at 1,024 rows (the prefill's shapes, cuBLASLt, f32 output)
#   roofline     decode_roofline.py 1 8 64 128 (plain cuBLAS, weights only, graph-replayed)
#   reference    the PyTorch reference's batched decode (bench_reference.py's method) at $REF_BATCHES
#   benchref     ../shared/golden/bench_reference.py --reps 2 --batches $BENCHREF_BATCHES (1): the reference's
#                encoder, prefill, decode and standard-job figures (≈ 4 min; timeout $BENCHREF_TIMEOUT, 480 s)
#   curve        engine_loop_bench 7b bf16 --audio 30 --tokens $CURVE_TOKENS at $CURVE_N (1,2,..,128) requests
#   curvelp      the same at $CURVE_N (1,64,128): greedy, greedy with logprobs (from the device), forced ids with
#                logprobs and sampled at T = 1 (logits to the host); the host's time between steps for each
#   curveab      the same at $CURVE_N (64,128) with each of $CURVE_CFGS (';'-separated), $CURVE_REPS (3) rounds
#                interleaved, every other round in reverse order (medians in summary.txt and steps.txt)
#   curvepad     the curve at $CURVE_N (16,32,64,128) with decode steps padded (--pad 8, the default) and not (--pad 0)
#   profile      the same at 64 requests with VV_CUDA_PROFILE=1 (per-op times, synced)
#   ttft         engine_loop_bench --ttft-probe 300
#   invariance   engine_loop_bench --invariance 8 --audio 10 --tokens 32
#   attn         cuda_decode_bench --attn-bench: the register and stream mma kernels (NOTES decattn2)
# Everything written under $OUT ends in $OUT/logs.tgz (the device returns at most 8 files).
# scripts/device/summarize.py DIR... prints every kept .json's figures per configuration (median of the
# repeats, named <configuration>_r1, _r2, ...), for reading a call's results.
#   deterministic  the same with --deterministic, and the curve's 1/64/128 points with it (its cost)
#   detws        deterministic mode's GEMMs on the ws form: its gpu test, invariance, and the curve's points
#                default / deterministic / deterministic on the ws form (its cost against both)
# Usage: OUT=... scripts/device/host_measure.sh step...
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/vvout}
mkdir -p "$OUT"
# HM_TARGETS: build only these targets (default: host_build.sh's gpu tests and benches). The steps that run
# the 7B golden (testsgolden, golden, chain) add gpu_full_golden to a list that leaves it out (session 33's
# first call built without it, and its golden check found no binary).
need_golden=0
for step in "$@"; do
  case $step in testsgolden | golden | chain) need_golden=1 ;; esac
done
if [ "$need_golden" = 1 ] && [ -n "${HM_TARGETS-}" ]; then
  case " $HM_TARGETS " in
    *" gpu_full_golden "*) ;;
    *) HM_TARGETS="$HM_TARGETS gpu_full_golden" ;;
  esac
fi
# shellcheck disable=SC2086
scripts/device/host_build.sh ${HM_TARGETS-} >"$OUT/build.log" 2>&1 || { cat "$OUT/build.log"; exit 1; }
. scripts/device/host_env.sh
B=/tmp/vvbuild/tests
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used,temperature.gpu --format=csv >"$OUT/gpu.txt" 2>&1
CURVE_TOKENS=${CURVE_TOKENS:-256}
# Both encoders over 60 s of audio (the median of 5 encodes), the encoder steps' A/B command.
E="$B/cuda_decode_bench --preset 7b --bf16 --no-gemv --prompt 16 --tokens 4 --enc-audio 60 --enc-reps 5 --job-audio 1 --job-tokens 1"
REF_BATCHES=${REF_BATCHES:-1,8,64,128}
# The figures of every kept .json on stdout, in summary.txt and at the end of steps.txt; then everything under
# $OUT into one archive with steps.txt beside it (at most 8 files come back from $OUT). A second invocation
# into the same $OUT keeps the first one's archive and writes logs2.tgz, and so on.
finish() {
  python3 scripts/device/summarize.py "$OUT" 2>&1 | tee "$OUT/summary.txt"
  cat "$OUT/summary.txt" >>"$OUT/steps.txt"
  local arch=logs.tgz n
  for ((n = 2; n < 100; ++n)); do [ -e "$OUT/$arch" ] || break; arch=logs$n.tgz; done
  (cd "$OUT" && tar -czf /tmp/vvlogs.tgz --exclude='logs*.tgz' . &&
    find . -type f ! -name steps.txt ! -name 'logs*.tgz' -delete && mv /tmp/vvlogs.tgz "$arch")
}
# Stopped by a signal (a caller's `timeout`, which signals this script alone): the running step's command
# is killed and what the steps wrote so far is archived all the same (session 34 lost a killed
# invocation's logs: its archive was never made and its loose files were past the 8 that come back).
child=
on_signal() {
  trap - TERM INT
  echo "host_measure.sh: stopped by a signal during ${current_step:-the build}; archived what there is" |
    tee -a "$OUT/steps.txt"
  [ -n "$child" ] && kill "$child" 2>/dev/null
  finish
  exit 143
}
trap on_signal TERM INT
# run: the command in the background and a wait (a signal interrupts a wait, not a foreground command).
run() {  # name command...
  local name=$1; shift
  local t0=$SECONDS
  "$@" >"$OUT/$name.log" 2>&1 &
  child=$!
  wait "$child"
  local rc=$?
  child=
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$OUT/steps.txt"
  tail -n 1 "$OUT/$name.log" | grep '^{' >"$OUT/$name.json" 2>/dev/null || rm -f "$OUT/$name.json"
}
# The gpu suite ($GTEST_FILTER) in $1 gtest shards at once, in the background (the caller waits; a hung
# kernel ends at $TESTS_TIMEOUT s); shard_summary: their gtest summary lines.
test_shards() {
  local n=$1 k
  for ((k = 0; k < n; ++k)); do
    run "tests_shard$k" timeout "${TESTS_TIMEOUT:-540}" env VV_REQUIRE_GPU=1 GTEST_TOTAL_SHARDS=$n \
      GTEST_SHARD_INDEX=$k $B/unit_kernels_cuda --gtest_filter="${GTEST_FILTER:-*}" &
  done
}
shard_summary() { cat "$OUT"/tests_shard*.log | grep -E '^\[  (PASSED|FAILED|SKIPPED) '; }
for step in "$@"; do
  current_step=$step
  case $step in
    tests)  # (a hung kernel ends at $TESTS_TIMEOUT s, 540 by default; set it lower so a call's later steps run)
      # $SHARDS > 1: that many gtest shards at once (as testsgolden, without the golden)
      if ((${SHARDS:-1} > 1)); then
        test_shards "$SHARDS"
        wait
        shard_summary | tee -a "$OUT/steps.txt"
      else
        run tests timeout "${TESTS_TIMEOUT:-540}" env VV_REQUIRE_GPU=1 $B/unit_kernels_cuda \
          --gtest_filter="${GTEST_FILTER:-*}"
      fi ;;
    testsgolden)  # the gpu suite in $SHARDS (3) gtest shards at once, make_golden.py --preset full beside
      # them, then gpu_full_golden: what `tests golden` checks, in about half the time
      run golden_make env PYTHONPATH=$VV_REF_PYTHONPATH python3 $VV_DEV/golden/make_golden.py --preset full \
        --device cuda --skip-fp64 --out /tmp/goldfull &
      test_shards "${SHARDS:-3}"
      wait
      shard_summary | tee "$OUT/tests_summary.txt"
      run golden_check env -u GTEST_FILTER VV_GOLDEN_DIR=/tmp/goldfull VV_REQUIRE_GPU=1 $B/gpu_full_golden ;;
    golden)
      run golden_make env PYTHONPATH=$VV_REF_PYTHONPATH python3 $VV_DEV/golden/make_golden.py --preset full \
        --device cuda --skip-fp64 --out /tmp/goldfull
      run golden_check env -u GTEST_FILTER VV_GOLDEN_DIR=/tmp/goldfull VV_REQUIRE_GPU=1 $B/gpu_full_golden ;;
    decode) run decode $B/cuda_decode_bench --preset 7b --bf16 ;;
    decode_attn)  # batch-1 decode's attention over the bf16 cache: the SIMT kernel against the mma one
      run decode_simt env VV_CUDA_DECODE_ATTN=simt $B/cuda_decode_bench --preset 7b --bf16 --no-gemv
      run decode_regs env VV_CUDA_MMA_DECODE=regs $B/cuda_decode_bench --preset 7b --bf16 --no-gemv ;;
    mlpfuse)  # the prefill MLP through bf16 intermediates (default): its gpu tests, then decode without it
      run mlpfuse_tests env VV_REQUIRE_GPU=1 $B/unit_kernels_cuda \
        --gtest_filter='CudaMlpFusion*:CudaLtOperandFusion*:CudaRunnerGolden*'
      run decode_nomlpfuse env VV_CUDA_MLP_FUSE=0 $B/cuda_decode_bench --preset 7b --bf16 --no-gemv ;;
    ffnlt)
      run ffnlt_tests env VV_REQUIRE_GPU=1 $B/unit_kernels_cuda --gtest_filter='CudaEncoderOps*:CudaEncoderPack*'
      run enc_lt $E
      run enc_nolt env VV_CUDA_FFN_LT=0 $E
      run enc_lt128 env VV_CUDA_FFN_LT_MIN=128 $E
      run enc_lt512 env VV_CUDA_FFN_LT_MIN=512 $E
      run enc_prof env VV_CUDA_PROFILE=1 $E ;;
    flashqv)
      run flashqv_tests env VV_REQUIRE_GPU=1 $B/unit_kernels_cuda --gtest_filter='CudaFlash*:CudaDeterministicAttention*'
      P="$B/cuda_decode_bench --preset 7b --bf16 --no-gemv --tokens 16 --enc-audio 1 --job-audio 1 --job-tokens 1"
      run pre1k_qv64 $P --prompt 1024
      run pre1k_qv128 env VV_CUDA_FLASH_QV=128 $P --prompt 1024
      run pre4k_qv64 $P --prompt 4096
      run pre4k_qv128 env VV_CUDA_FLASH_QV=128 $P --prompt 4096 ;;
    flashform)  # the flash kernel's forms (table entries a tile ahead in all): tests, prefills, Nsight sections
      run flashform_tests env VV_REQUIRE_GPU=1 $B/unit_kernels_cuda --gtest_filter='CudaFlash*:CudaDeterministicAttention*'
      P="$B/cuda_decode_bench --preset 7b --bf16 --no-gemv --tokens 16 --enc-audio 1 --job-audio 1 --job-tokens 1"
      run pre1k_narrow $P --prompt 1024
      run pre1k_x2 env VV_CUDA_FLASH_QV=128x2 $P --prompt 1024
      run pre4k_narrow $P --prompt 4096
      run pre4k_x2 env VV_CUDA_FLASH_QV=128x2 $P --prompt 4096
      NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      for form in 64 128x2; do
        run ncuflash_$form env VV_CUDA_FLASH_QV=$form $NCU --clock-control none --kernel-name regex:flash_prefill \
          --launch-skip 111 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
          --section Occupancy --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section LaunchStats \
          $P --prompt 4096
      done ;;
    flashwg)  # the wgmma form of the flash kernel (VV_CUDA_FLASH_QV=wg): tests, prefills against the default, Nsight
      [ "${FLASH_TESTS:-1}" = 0 ] ||
        run flashwg_tests env VV_REQUIRE_GPU=1 $B/unit_kernels_cuda --gtest_filter='CudaFlash*:CudaDeterministicAttention*'
      P="$B/cuda_decode_bench --preset 7b --bf16 --no-gemv --tokens 16 --enc-audio 1 --job-audio 1 --job-tokens 1"
      for rows in ${FLASH_ROWS:-1024 4096}; do
        for form in ${FLASH_FORMS:-narrow wg wgp wgf wgfl}; do
          run pre${rows}_$form env VV_CUDA_FLASH_QV=$form $P --prompt $rows
        done
      done
      NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      for form in ${FLASH_NCU:-wg wgp wgf wgfl}; do
        [ "$form" = none ] && continue
        run ncuflash_$form env VV_CUDA_FLASH_QV=$form $NCU --clock-control none --kernel-name regex:flash_wg \
          --launch-skip 111 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
          --section Occupancy --section ComputeWorkloadAnalysis --section LaunchStats $P --prompt 4096
      done ;;
    b1opt)  # batch-1 decode opt-ins: their gpu tests, then decode with neither, each, both (twice, interleaved)
      # B1_TABLES=0: neither the tests nor the one-row tables (a call that ran testsgolden already)
      if [ "${B1_TABLES:-1}" != 0 ]; then
        run b1opt_tests env VV_REQUIRE_GPU=1 $B/unit_kernels_cuda \
          --gtest_filter='CudaDecodeFusion*:CudaOps.Bulk*:CudaOps.LeanDecodeAttention*:CudaOps.PagedAttention*'
        run table_m1 env VV_CUDA_GEMV_BULK=0 $B/cuda_decode_bench --preset 7b --bf16 --table-only --gemv-m 1
        run table_m1_bulk env VV_CUDA_GEMV_BULK=1 $B/cuda_decode_bench --preset 7b --bf16 --table-only --gemv-m 1
        run table_m1_bulk200 env VV_CUDA_GEMV_BULK=1 VV_CUDA_GEMV_BULK_KB=200 $B/cuda_decode_bench --preset 7b \
          --bf16 --table-only --gemv-m 1
      fi
      # B1_CFGS: ';'-separated configurations (default: the five below, session 16's opt-ins); B1_REPS rounds (2)
      # The order of the configurations is reversed every other round (A B, B A, ...): one warm H100 spread
      # four runs of one configuration over ±3 % in session 25, drifting within a call.
      IFS=';' read -ra b1cfgs <<<"${B1_CFGS:-plain;VV_CUDA_GEMV_BULK=1;VV_CUDA_GEMV_BULK=3;VV_CUDA_ATTN_LEAN=1;VV_CUDA_GEMV_BULK=3 VV_CUDA_ATTN_LEAN=1}"
      for i in $(seq "${B1_REPS:-2}"); do
        b1order=("${b1cfgs[@]}")
        if ((i % 2 == 0)); then
          b1order=()
          for ((k = ${#b1cfgs[@]} - 1; k >= 0; --k)); do b1order+=("${b1cfgs[k]}"); done
        fi
        for cfg in "${b1order[@]}"; do
          read -ra kv <<<"${cfg/plain/VV_CUDA_NONE=1}"
          # shellcheck disable=SC2086  # B1_ARGS: more arguments (e.g. --prompt 4096), split on spaces
          run "decode_${cfg//[^A-Za-z0-9]/_}_r$i" env "${kv[@]}" $B/cuda_decode_bench --preset 7b --bf16 --no-gemv \
            --tokens 256 --enc-audio 1 --job-audio 1 --job-tokens 1 ${B1_ARGS:-}
        done
      done ;;
    chain)  # VV_CUDA_DECODE_CHAIN=1 (one persistent kernel a layer from o to the next rope): its gpu tests (a
      # barrier that never opens traps after 10 s; timeout 300 bounds the rest), the 7B golden with it when
      # /tmp/goldfull exists (testsgolden or golden earlier in the call), then batch-1 decode with each of
      # $CHAIN_CFGS, $B1_REPS rounds, interleaved
      run chain_tests timeout 300 env VV_REQUIRE_GPU=1 $B/unit_kernels_cuda \
        --gtest_filter='CudaDecodeFusion.Chained*:CudaDecodeFusion.LayerOpSequenceWithUnpaired*:CudaRunnerGolden.Chained*:CudaRunnerGolden.GraphReplayed*'
      if [ -d /tmp/goldfull ]; then
        run chain_golden env -u GTEST_FILTER VV_CUDA_DECODE_CHAIN=1 VV_GOLDEN_DIR=/tmp/goldfull VV_REQUIRE_GPU=1 \
          $B/gpu_full_golden
      fi
      IFS=';' read -ra chcfgs <<<"${CHAIN_CFGS:-plain;VV_CUDA_GEMV_BULK=3;VV_CUDA_DECODE_CHAIN=1;VV_CUDA_DECODE_CHAIN=1 VV_CUDA_CHAIN_ATTN=1;VV_CUDA_DECODE_CHAIN=1 VV_CUDA_CHAIN_ATTN=1 VV_CUDA_ATTN_LEAN=1;VV_CUDA_DECODE_CHAIN=1 VV_CUDA_CHAIN_ATTN=1 VV_CUDA_CHAIN_L2_KB=160;VV_CUDA_DECODE_CHAIN=1 VV_CUDA_CHAIN_KB=150;VV_CUDA_DECODE_CHAIN=1 VV_CUDA_CHAIN_ATTN=1 VV_CUDA_CHAIN_TRACE=1}"
      for i in $(seq "${B1_REPS:-2}"); do
        for cfg in "${chcfgs[@]}"; do
          read -ra kv <<<"${cfg/plain/VV_CUDA_NONE=1}"
          run "decode_${cfg//[^A-Za-z0-9]/_}_r$i" timeout 120 env "${kv[@]}" $B/cuda_decode_bench --preset 7b --bf16 \
            --no-gemv --tokens 256 --enc-audio 1 --job-audio 1 --job-tokens 1
        done
      done ;;
    batch)  # batched decode steps alone (issue 13's 64/128 points without the scheduler): $BATCH_ROWS rows at
      # $BATCH_CTX positions, 64 steps, with each of $BATCH_CFGS (';'-separated; default: none, the mma
      # decode attention's kv heads in one block, its 128- and 256-key units), $B1_REPS rounds, interleaved
      IFS=';' read -ra bcfgs <<<"${BATCH_CFGS:-plain;VV_CUDA_MMA_DECODE_HEADS=1;VV_CUDA_MMA_DECODE_CHUNK=128;VV_CUDA_MMA_DECODE_CHUNK=256}"
      for i in $(seq "${B1_REPS:-2}"); do
        for cfg in "${bcfgs[@]}"; do
          read -ra kv <<<"${cfg/plain/VV_CUDA_NONE=1}"
          run "batch_${cfg//[^A-Za-z0-9]/_}_r$i" timeout 200 env "${kv[@]}" $B/cuda_decode_bench --preset 7b --bf16 \
            --no-gemv --batch-bench --batch-rows "${BATCH_ROWS:-1,64,128}" --batch-ctx "${BATCH_CTX:-400}"
        done
      done ;;
    ncubatch)  # Nsight Compute: every kernel's duration of 64-row decode steps (no prefill: the context's bytes
      # as allocated); the last ≈ 180 rows are one step's kernels, each alone
      NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      run ncubatch timeout 300 env ${NCU_ENV:-VV_CUDA_NONE=1} $NCU --clock-control none --cache-control none \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --launch-count 4000 $B/cuda_decode_bench \
        --preset 7b --bf16 --no-gemv --batch-bench --batch-rows "${BATCH_ROWS:-64}" --batch-ctx "${BATCH_CTX:-400}" \
        --batch-steps 2 --batch-no-prefill ;;
    ncuattn)  # the batched decode attention (mma_decode_stream_kernel) at $ATTN_ROWS (128 64) rows, context
      # $BATCH_CTX (400): speed of light, memory, warp states, scheduler, occupancy and hot SASS of one launch
      # of the second step (the first step's launches skipped)
      NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      for rows in ${ATTN_ROWS:-128 64}; do
        run "ncuattn_$rows" timeout 200 $NCU --clock-control none --kernel-name regex:mma_decode_stream \
          --launch-skip 30 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
          --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
          --section SourceCounters --section ComputeWorkloadAnalysis --section InstructionStats \
          $B/cuda_decode_bench --preset 7b --bf16 --no-gemv --batch-bench --batch-rows "$rows" \
          --batch-ctx "${BATCH_CTX:-400}" --batch-steps 2 --batch-no-prefill
        # NCU_SRC=1: also the per-SASS-instruction stall samples of that launch (the source page as CSV)
        if [ "${NCU_SRC:-0}" = 1 ]; then
          run "ncuattn_src_$rows" timeout 200 $NCU --clock-control none --kernel-name regex:mma_decode_stream \
            --launch-skip 30 --launch-count 1 --section SourceCounters --section WarpStateStats \
            -o "$OUT/ncuattn_$rows" -f $B/cuda_decode_bench --preset 7b --bf16 --no-gemv --batch-bench \
            --batch-rows "$rows" --batch-ctx "${BATCH_CTX:-400}" --batch-steps 2 --batch-no-prefill
          $NCU --import "$OUT/ncuattn_$rows.ncu-rep" --page source --csv --print-source sass \
            >"$OUT/ncuattn_sass_$rows.csv" 2>&1
          rm -f "$OUT/ncuattn_$rows.ncu-rep"
          python3 scripts/device/ncu_sass_summary.py "$OUT/ncuattn_sass_$rows.csv" 2>&1 |
            sed "s/^/ncuattn_sass_$rows /" | tee -a "$OUT/steps.txt"
        fi
      done ;;
    ncugemv)  # why o/down/q stream slower than gate_up: per-launch DRAM figures of each one-row GEMV shape
      NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      M="gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed"
      M="$M,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active"
      for v in 0 1; do
        run ncugemv_bulk$v env VV_CUDA_GEMV_BULK=$v $NCU --clock-control none --cache-control none --csv \
          --kernel-name regex:decode_gemv --launch-count 200 --metrics "$M" \
          $B/cuda_decode_bench --preset 7b --bf16 --table-only --gemv-m 1
      done ;;
    curvepf)  # batched decode steps: the o projection's weights prefetched into L2 during the attention, and
      # the tensor-core decode attention's keys per unit (64, the default; 128; 256)
      for cfg in VV_CUDA_L2_PREFETCH=0 VV_CUDA_L2_PREFETCH=1 VV_CUDA_MMA_DECODE_HEADS=1 VV_CUDA_MMA_DECODE_CHUNK=128 \
        VV_CUDA_MMA_DECODE_CHUNK=256 \
        "VV_CUDA_MMA_DECODE_CHUNK=256 VV_CUDA_MMA_DECODE_STAGES=4" \
        "VV_CUDA_MMA_DECODE_CHUNK=256 VV_CUDA_MMA_DECODE_WARPS=4"; do
        read -ra kv <<<"$cfg"
        run "curve_${cfg//[^A-Za-z0-9]/_}" env "${kv[@]}" $B/engine_loop_bench --preset 7b --device cuda --bf16 \
          --audio 30 --tokens "$CURVE_TOKENS" --concurrency 64,128
      done ;;
    prefill4kab)  # 4,096 rows: the default (1,024-row chunks) against one chunk with rope inside the flash kernel
      for i in $(seq "${AB_REPS:-2}"); do
        P="$B/cuda_decode_bench --preset 7b --bf16 --no-gemv --prompt 4096 --tokens 16 --enc-audio 1 --job-audio 1 --job-tokens 1"
        run pre4096_default_r$i $P
        run pre4096_c4096rope_r$i env VV_CUDA_ROPE_FLASH=1 $P --chunk 4096
        run pre4096_c4096_r$i $P --chunk 4096
      done ;;
    prefillchunk)  # the 4,096-row prefill in chunks of 1,024 (the default), 2,048 and 4,096 rows
      for c in 1024 2048 4096; do
        run pre4096_chunk$c $B/cuda_decode_bench --preset 7b --bf16 --no-gemv --prompt 4096 --chunk $c --tokens 16 \
          --enc-audio 1 --job-audio 1 --job-tokens 1
      done ;;
    normrope)  # VV_CUDA_NORM_DROP=1 and VV_CUDA_ROPE_FLASH=1: their gpu tests, the prefills with each, both, neither
      run normrope_tests env VV_REQUIRE_GPU=1 $B/unit_kernels_cuda \
        --gtest_filter='CudaLtOperandFusion*:CudaMlpFusion*:CudaFlashPrefill.RopeInside*:CudaRunnerGolden*'
      P="$B/cuda_decode_bench --preset 7b --bf16 --no-gemv --tokens 16 --enc-audio 1 --job-audio 1 --job-tokens 1"
      for rows in 1024 4096; do
        run pre${rows}_plain $P --prompt $rows
        run pre${rows}_norm env VV_CUDA_NORM_DROP=1 $P --prompt $rows
        run pre${rows}_rope env VV_CUDA_ROPE_FLASH=1 $P --prompt $rows
        run pre${rows}_both env VV_CUDA_NORM_DROP=1 VV_CUDA_ROPE_FLASH=1 $P --prompt $rows
      done ;;
    mlprows)  # the MLP fusion on batched decode steps (VV_CUDA_MLP_FUSE_ROWS=2): its gpu tests, the curve's 64/128
      run mlprows_tests env VV_REQUIRE_GPU=1 $B/unit_kernels_cuda --gtest_filter='CudaMlpFusion*'
      for v in 256 2; do
        run curve_mlprows$v env VV_CUDA_MLP_FUSE_ROWS=$v $B/engine_loop_bench --preset 7b --device cuda --bf16 \
          --audio 30 --tokens "$CURVE_TOKENS" --concurrency 64,128
      done ;;
    gemvwide)
      run gemvwide_tests env VV_REQUIRE_GPU=1 VV_CUDA_GEMV_WIDE=1 $B/unit_kernels_cuda \
        --gtest_filter='CudaDecode*:CudaRunnerGolden*'
      run decode_gemvwide env VV_CUDA_GEMV_WIDE=1 $B/cuda_decode_bench --preset 7b --bf16 --no-gemv
      run decode_plain $B/cuda_decode_bench --preset 7b --bf16 --no-gemv ;;
    fasterf)  # the fast erf (the default since session 15) against erff
      run fasterf_tests env VV_REQUIRE_GPU=1 VV_CUDA_FFN_FAST_ERF=0 $B/unit_kernels_cuda \
        --gtest_filter='CudaEncoderOps.*Ffn*:CudaEncoderPack*'
      run enc_erf env VV_CUDA_FFN_FAST_ERF=0 $E
      run enc_fasterf $E ;;
    encblock)  # the encoder block kernel, the wgmma FFN, the fast erf: tests, encoders A/B, profile, Nsight
      run encblock_tests env VV_REQUIRE_GPU=1 $B/unit_kernels_cuda --gtest_filter='CudaEncoderOps.*:CudaEncoderPack*'
      run encblock_tests_erff env VV_REQUIRE_GPU=1 VV_CUDA_FFN_FAST_ERF=0 $B/unit_kernels_cuda \
        --gtest_filter='CudaEncoderOps.WholeBlock*:CudaEncoderOps.Wgmma*:CudaEncoderPack.WholeBlock*'
      # (all three are the default since session 15: "plain" is them all, the others take some away)
      O="VV_CUDA_ENC_BLOCK=0 VV_CUDA_FFN_WG=0 VV_CUDA_FFN_FAST_ERF=0"
      for i in 1 2; do
        for cfg in "$O" "VV_CUDA_FFN_WG=0 VV_CUDA_FFN_FAST_ERF=0" "VV_CUDA_ENC_BLOCK=0 VV_CUDA_FFN_FAST_ERF=0" \
          VV_CUDA_FFN_FAST_ERF=0 plain; do
          read -ra kv <<<"${cfg/plain/VV_CUDA_NONE=1}"
          run "enc_${cfg//[^A-Za-z0-9]/_}_r$i" env "${kv[@]}" $E
        done
      done
      run encblock_prof env VV_CUDA_PROFILE=1 $E
      NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      run ncuencblock $NCU --clock-control none \
        --kernel-name regex:'conv_block_kernel|ffn_wg_kernel' --launch-count 12 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section LaunchStats \
        ${E/--enc-reps 5/--enc-reps 1} ;;
    lanes)  # both encoders over 60 s with the semantic one on a second stream (default) and on one stream
      for i in $(seq "${AB_REPS:-2}"); do
        run "enc_lanes_r$i" $E
        run "enc_onestream_r$i" env VV_CUDA_LANES=0 $E
      done ;;
    enccache)  # both encoders over 60 s (5 timed encodes) with the allocation cache (default) and without it
      # (VV_CUDA_ALLOC_CACHE=0), $AB_REPS (2) rounds: each run's time and host time in encode()
      for i in $(seq "${AB_REPS:-2}"); do
        run "enc_cache_r$i" $E
        run "enc_nocache_r$i" env VV_CUDA_ALLOC_CACHE=0 $E
      done
      grep -H '^encoder \(runs\|warm-up runs\)' "$OUT"/enc_*cache_r*.log | sed "s|^$OUT/||" | tee -a "$OUT/steps.txt" ;;
    convgemm)  # VV_CUDA_CONV_GEMM (default; the encoders' strided convs without the bf16 pack): its gpu tests,
      # both encoders over 60 s with and without it (=0; $AB_REPS rounds), the per-GEMM profile with it
      run convgemm_tests env VV_REQUIRE_GPU=1 $B/unit_kernels_cuda --gtest_filter='CudaConvGemm*:CudaEncoderPack*'
      for i in $(seq "${AB_REPS:-2}"); do
        run "enc_convgemm_r$i" $E
        run "enc_noconvgemm_r$i" env VV_CUDA_CONV_GEMM=0 $E
      done
      run encshapes_convgemm env VV_CUDA_PROFILE=2 ${E/--enc-reps 5/--enc-reps 2} ;;
    encalgos)  # both encoders over 60 s with VV_CUDA_LT_ALGOS=16 (each cuBLASLt shape times 16 algorithms: the
      # late stages' few-row FFN GEMMs and convs may take split-K ones) against the default, $AB_REPS rounds
      for i in $(seq "${AB_REPS:-2}"); do
        run "enc_default_r$i" $E
        run "enc_ltalgos16_r$i" env VV_CUDA_LT_ALGOS=16 $E
      done ;;
    encshapes) run encshapes env VV_CUDA_PROFILE=2 $B/cuda_decode_bench --preset 7b --bf16 --no-gemv --prompt 16 \
      --tokens 4 --enc-audio 60 --enc-reps 2 --job-audio 1 --job-tokens 1 ;;
    opprofile4k) run opprofile4k env VV_CUDA_PROFILE=1 $B/cuda_decode_bench --preset 7b --bf16 --no-gemv \
      --prompt 4096 --tokens 4 --enc-audio 1 --job-audio 1 --job-tokens 1 ;;
    prefill4k) run prefill4k $B/cuda_decode_bench --preset 7b --bf16 --no-gemv --prompt 4096 --tokens 16 \
      --enc-audio 1 --job-audio 1 --job-tokens 1 ;;
    decode_tuned) run decode_tuned env VV_CUDA_LT_ALGOS=16 $B/cuda_decode_bench --preset 7b --bf16 ;;
    curve_tuned) run curve_tuned env VV_CUDA_LT_ALGOS=16 $B/engine_loop_bench --preset 7b --device cuda --bf16 \
      --audio 30 --tokens "$CURVE_TOKENS" --concurrency 64,128 ;;
    skinny)  # the split-K skinny GEMM (VV_CUDA_SKINNY_GEMM=1): its tests, the GEMM table and the curve's 64/128
      run skinny_tests env VV_REQUIRE_GPU=1 $B/unit_kernels_cuda --gtest_filter='CudaSkinny*'
      run decode_skinny env VV_CUDA_SKINNY_GEMM=1 $B/cuda_decode_bench --preset 7b --bf16
      run decode_skinny1 env VV_CUDA_SKINNY_GEMM=1 VV_CUDA_SKINNY_PER_SM=1 $B/cuda_decode_bench --preset 7b --bf16
      run curve_skinny env VV_CUDA_SKINNY_GEMM=1 $B/engine_loop_bench --preset 7b --device cuda --bf16 \
        --audio 30 --tokens "$CURVE_TOKENS" --concurrency 64,128 ;;
    stream)  # the weight-streaming GEMM (VV_CUDA_STREAM_GEMM): its gpu tests, the GEMM table with and
      # without it, and the curve's 8/64/128 points with it ($STREAM_ROWS, default 2-128)
      run stream_tests env VV_REQUIRE_GPU=1 $B/unit_kernels_cuda --gtest_filter='CudaStreamGemm*'
      run table_default $B/cuda_decode_bench --preset 7b --bf16 --table-only --gemv-m 1,2,8,16,32,64,128
      run table_stream env VV_CUDA_STREAM_GEMM=1-128 $B/cuda_decode_bench --preset 7b --bf16 --table-only \
        --gemv-m 1,2,8,16,32,64,128
      run table_stream_wg1 env VV_CUDA_STREAM_GEMM=1-128 VV_CUDA_STREAM_WG=1 $B/cuda_decode_bench --preset 7b \
        --bf16 --table-only --gemv-m 1,8,64,128
      run curve_stream env VV_CUDA_STREAM_GEMM="${STREAM_ROWS:-2-128}" $B/engine_loop_bench --preset 7b \
        --device cuda --bf16 --audio 30 --tokens "$CURVE_TOKENS" --concurrency "${CURVE_N:-8,64,128}" ;;
    streamws)  # the warp-specialised stream GEMM (VV_CUDA_STREAM_GEMM_KIND=ws): its gpu tests, then the GEMM
      # table at $WS_ROWS (1,16,64,128) rows: cuBLASLt, the one-barrier form, the warp-specialised one with
      # clusters of two (a multicast), of one, of four, and with at least 12 units a run ($WS_KINDS picks;
      # ws1t: clusters of one with VV_CUDA_STREAM_WS_TRACE=2, where each launch's time goes; WS_NCU=1: and
      # Nsight)
      run streamws_tests timeout 300 env VV_REQUIRE_GPU=1 $B/unit_kernels_cuda --gtest_filter='CudaStreamGemm*'
      for kind in ${WS_KINDS:-lt wgmma ws ws1 ws4 ws12}; do
        kenv=(VV_CUDA_NONE=1)
        [ $kind = lt ] || kenv=(VV_CUDA_STREAM_GEMM=1-128 VV_CUDA_STREAM_GEMM_KIND=${kind:0:2})
        [ $kind = wgmma ] && kenv=(VV_CUDA_STREAM_GEMM=1-128 VV_CUDA_STREAM_GEMM_KIND=wgmma)
        [ $kind = ws1 ] && kenv+=(VV_CUDA_STREAM_WS_CLUSTER=1)
        [ $kind = ws1t ] && kenv+=(VV_CUDA_STREAM_WS_CLUSTER=1 VV_CUDA_STREAM_WS_TRACE=2)
        [ $kind = ws4 ] && kenv+=(VV_CUDA_STREAM_WS_CLUSTER=4)
        [ $kind = ws12 ] && kenv+=(VV_CUDA_STREAM_WS_MIN_UNITS=12)
        [ $kind = lt ] || [ $kind = ws1t ] || kenv+=(VV_CUDA_STREAM_WS_TRACE=1)
        run "table_$kind" timeout 200 env "${kenv[@]}" $B/cuda_decode_bench --preset 7b --bf16 --table-only \
          --gemv-m "${WS_ROWS:-1,16,64,128}"
      done
      # WS_NCU=1: Nsight Compute's DRAM and L2 figures of every GEMM launch of the 64-row table, the ws
      # form against cuBLASLt (which is L2-bound near 80 % on gate_up: NOTES, session 8)
      if [ "${WS_NCU:-0}" = 1 ]; then
        NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
        M="gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed"
        M="$M,lts__t_sectors_srcunit_tex_op_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed"
        M="$M,lts__t_sector_hit_rate.pct,launch__grid_size"
        for kind in lt ws; do
          kenv=(VV_CUDA_NONE=1)
          [ $kind = ws ] && kenv=(VV_CUDA_STREAM_GEMM=1-128 VV_CUDA_STREAM_GEMM_KIND=ws)
          run "ncu_ws_$kind" timeout 300 env "${kenv[@]}" $NCU --clock-control none --cache-control none --csv \
            --kernel-name regex:'stream_gemm|nvjet|sm90|gemm' --launch-count 120 --metrics "$M" \
            $B/cuda_decode_bench --preset 7b --bf16 --table-only --gemv-m 64
        done
      fi ;;
    streamprobe)  # where the stream GEMM's time goes: the table with plain stores for atomics, without
      # wgmma, and 1 block per SM (results wrong by design in the first two)
      for pr in 2 4 6; do
        run "table_probe$pr" env VV_CUDA_STREAM_GEMM=1-128 VV_CUDA_STREAM_PROBE=$pr $B/cuda_decode_bench --preset 7b \
          --bf16 --table-only --gemv-m 1,16,64,128
      done
      run table_per_sm1 env VV_CUDA_STREAM_GEMM=1-128 VV_CUDA_STREAM_PER_SM=1 $B/cuda_decode_bench --preset 7b \
        --bf16 --table-only --gemv-m 1,16,64,128 ;;
    ncu)  # Nsight Compute on gate_up at 64 rows: the stream GEMM (Hopper form) and cuBLASLt's kernel
      # (the table's 4th shape: 71 launches per shape, so skip into its timed repetitions)
      NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      SECTIONS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
        --section SchedulerStats --section LaunchStats --section Occupancy"
      run ncu_stream env VV_CUDA_STREAM_GEMM=1-128 $NCU --clock-control none --kernel-name regex:stream_gemm_wg \
        --launch-skip 220 --launch-count 1 $SECTIONS $B/cuda_decode_bench --preset 7b --bf16 --table-only --gemv-m 64
      run ncu_cublas $NCU --clock-control none --kernel-name regex:'nvjet|xmma|sm90|cutlass|gemm' \
        --launch-skip 220 --launch-count 1 $SECTIONS $B/cuda_decode_bench --preset 7b --bf16 --table-only \
        --gemv-m 64 ;;
    opprofile) run opprofile env VV_CUDA_PROFILE=1 $B/cuda_decode_bench --preset 7b --bf16 ;;
    ncuattn)  # why batch-1's decode attention takes ~16 µs a layer: Nsight sections of a few launches of it
      # after a 1,024-row prompt (the decode steps' launches; the prefill's attention is the flash kernel)
      NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      run ncuattn timeout 300 $NCU --clock-control none --kernel-name regex:decode_attn_kernel --launch-skip 56 \
        --launch-count 3 --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
        --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats --section SourceCounters \
        $B/cuda_decode_bench --preset 7b --bf16 --no-gemv --prompt 1024 --tokens 4 --enc-audio 1 --job-audio 1 \
        --job-tokens 1 ;;
    ncugemvsec)  # why batch-1's default-kernel GEMVs (norm + q/k/v paired, o, norm + gate_up + SwiGLU) stream
      # below the copy rate: Nsight sections of 6 consecutive launches of decode_gemv_kernel in the decode
      # steps (85 a token with the LM head; the 7B's down is on the bulk kernel), after a 64-row prompt
      NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      run ncugemvsec timeout 240 env ${NCU_ENV:-VV_CUDA_NONE=1} $NCU --clock-control none --kernel-name decode_gemv_kernel \
        --launch-skip 172 --launch-count 6 --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
        $B/cuda_decode_bench --preset 7b --bf16 --no-gemv --prompt 64 --tokens 6 --enc-audio 1 --job-audio 1 \
        --job-tokens 1 ;;
    ncuattnb)  # why the batched decode attention streams K/V at half the copy bandwidth (issue 13; H100,
      # session 18: 996 µs of a 64-row step, 1.53 TB/s): Nsight sections of a few launches of the mma stream
      # kernel in $BATCH_ROWS (128) -row steps at $BATCH_CTX (400) positions ($NCU_ENV as ncudecode's)
      NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      run ncuattnb timeout 300 env ${NCU_ENV:-VV_CUDA_NONE=1} $NCU --clock-control none \
        --kernel-name regex:mma_decode --launch-skip 28 --launch-count 3 --section SpeedOfLight \
        --section WarpStateStats --section SchedulerStats --section Occupancy --section MemoryWorkloadAnalysis \
        --section MemoryWorkloadAnalysis_Tables --section LaunchStats --section SourceCounters \
        $B/cuda_decode_bench --preset 7b --bf16 --no-gemv --batch-bench --batch-rows "${BATCH_ROWS:-128}" \
        --batch-ctx "${BATCH_CTX:-400}" --batch-steps 2 ;;
    ktrace)
      read -ra ktenv <<<"${KT_ENV:-VV_CUDA_NONE=1}"
      # 224 + 32 tokens: the cache reserved (and so the attention's table and splits) as b1opt's 256 tokens
      run ktrace_b1 env "${ktenv[@]}" $B/cuda_decode_bench --preset 7b --bf16 --no-gemv --tokens 224 --enc-audio 1 \
        --job-audio 1 --job-tokens 1 --kernel-trace 32 --kernel-trace-all
      run ktrace_b1_early env "${ktenv[@]}" $B/cuda_decode_bench --preset 7b --bf16 --no-gemv --tokens 224 \
        --enc-audio 1 --job-audio 1 --job-tokens 1 --kernel-trace 32 --kernel-trace-early
      run ktrace_batch env "${ktenv[@]}" $B/cuda_decode_bench --preset 7b --bf16 --no-gemv --batch-bench \
        --batch-rows "${KT_ROWS:-64,128}" --batch-ctx 400 --batch-steps 16 --kernel-trace 16 --kernel-trace-all
      grep -h '^ktrace.*\(steps of\|recorded\|adds summed\| x  adds\|traced steps\)' "$OUT"/ktrace_*.log |
        tee -a "$OUT/steps.txt" ;;
    b1ab | encab)  # this snapshot against a base commit's (.device/base.tar.gz: prepare.sh --base REV), both built
      # here (the base's cuda_decode_bench into /tmp/vvbuild_base), $B1_REPS rounds interleaved, every other one
      # reversed: b1ab batch-1 decode (256 tokens), encab both encoders over 60 s (the median of 5 encodes a run)
      if [ ! -f "$VV_DEV/base.tar.gz" ]; then
        echo "$step: no .device/base.tar.gz (scripts/device/prepare.sh --base REV)" | tee -a "$OUT/steps.txt"
      else
        t0=$SECONDS
        rm -rf /tmp/vvbase && mkdir -p /tmp/vvbase && tar -xzf "$VV_DEV/base.tar.gz" -C /tmp/vvbase &&
          cp -r tests/data /tmp/vvbase/tests/
        if [ -x /tmp/vvbuild_base/tests/cuda_decode_bench ] ||
          { cmake -S /tmp/vvbase -B /tmp/vvbuild_base -G Ninja -U '__pkg_config_*' -DCMAKE_BUILD_TYPE=Release \
            -DVV_WITH_CUDA=ON -DVV_CUDA_ARCHS=90a -DCMAKE_CUDA_ARCHITECTURES=90a >"$OUT/${step}_build.log" 2>&1 &&
            cmake --build /tmp/vvbuild_base -j 16 --target cuda_decode_bench >>"$OUT/${step}_build.log" 2>&1; }; then
          echo "$step base $(cat "$VV_DEV/base.rev") built in $((SECONDS - t0))s" | tee -a "$OUT/steps.txt"
          args=(--preset 7b --bf16 --no-gemv --tokens 256 --enc-audio 1 --job-audio 1 --job-tokens 1)
          [ "$step" = encab ] && args=(--preset 7b --bf16 --no-gemv --prompt 16 --tokens 4 --enc-audio 60 --enc-reps 5
            --job-audio 1 --job-tokens 1)
          for i in $(seq "${B1_REPS:-2}"); do
            ab=(head base)
            ((i % 2 == 0)) && ab=(base head)
            for w in "${ab[@]}"; do
              bin=$B/cuda_decode_bench
              [ "$w" = base ] && bin=/tmp/vvbuild_base/tests/cuda_decode_bench
              run "${step/b1ab/decode}_${w}_r$i" $bin "${args[@]}"
            done
          done
        else
          echo "$step: the base did not build (${step}_build.log)" | tee -a "$OUT/steps.txt"
        fi
      fi ;;
    b1inab)  # batch-1 decode A/B in one process (cuda_decode_bench --ab): for each of $AB_CFGS (';'-separated
      # NAME=VALUE lists; switches read when a backend is created), a runner with it against one without, over
      # one random checkpoint, $AB_ROUNDS (16) rounds of $AB_STEPS (32) steps each, taking turns; $B1_ARGS: more
      # arguments (e.g. --prompt 4096). The ratio B/A of the median steps and the rounds B won go to steps.txt.
      IFS=';' read -ra abcfgs <<<"${AB_CFGS:-VV_CUDA_ATTN_L2PF=2}"
      for cfg in "${abcfgs[@]}"; do
        name="b1inab_${cfg//[^A-Za-z0-9]/_}"
        # shellcheck disable=SC2086  # B1_ARGS: more arguments, split on spaces
        run "$name" $B/cuda_decode_bench --preset 7b --bf16 --no-gemv --ab "$cfg" --ab-rounds "${AB_ROUNDS:-16}" \
          --ab-steps "${AB_STEPS:-32}" ${B1_ARGS:-}
        grep -h '^ab: ' "$OUT/$name.log" | sed "s/^/$name /" | tee -a "$OUT/steps.txt"
      done ;;
    astamps)  # the fused one-row attention's blocks stage by stage in the graph (VV_CUDA_ATTN_STAMPS=1: cuda_decode_bench's
      # "astamp" lines) with each of $AS_CFGS (';'-separated; 'plain' = none; default: plain and VV_CUDA_ATTN_TRIG_PRE=0);
      # $AS_ARGS: more arguments (e.g. --prompt 4096)
      IFS=';' read -ra ascfgs <<<"${AS_CFGS:-plain;VV_CUDA_ATTN_TRIG_PRE=0}"
      for cfg in "${ascfgs[@]}"; do
        read -ra kv <<<"${cfg/plain/VV_CUDA_NONE=1}"
        name="astamps_${cfg//[^A-Za-z0-9]/_}"
        # shellcheck disable=SC2086  # AS_ARGS: more arguments (e.g. --prompt 4096), split on spaces
        run "$name" env "${kv[@]}" VV_CUDA_ATTN_STAMPS=1 $B/cuda_decode_bench --preset 7b --bf16 --no-gemv --tokens 256 \
          --enc-audio 1 --job-audio 1 --job-tokens 1 ${AS_ARGS:-}
        grep -h '^astamp' "$OUT/$name.log" | sed "s/^/$name /" | tee -a "$OUT/steps.txt"
      done ;;
    ncudecode)
      NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      run ncudecode timeout 240 env ${NCU_ENV:-VV_CUDA_NONE=1} $NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum \
        --csv --launch-count 4000 $B/cuda_decode_bench --preset 7b --bf16 --no-gemv --prompt 64 --tokens 4 \
        --enc-audio 1 --job-audio 1 --job-tokens 1 ;;
    ncudecodebulk)  # ncudecode's per-kernel durations with VV_CUDA_GEMV_BULK=1 (which fused form loses)
      NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      run ncudecode_bulk env VV_CUDA_GEMV_BULK=1 timeout 240 $NCU --clock-control none --cache-control none \
        --metrics gpu__time_duration.sum --csv --launch-count 4000 $B/cuda_decode_bench --preset 7b --bf16 --no-gemv \
        --prompt 64 --tokens 4 --enc-audio 1 --job-audio 1 --job-tokens 1 ;;
    ncuencsrc)  # where the encoders' block kernels spend their issue slots: instruction mix, stalls, hot SASS
      NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      # $NCU_KERNELS (a regex) and $NCU_LAUNCHES pick other launches (ffn_wg_kernel, 3: the c128 block's first)
      # NCU_SRC=2: only the stall samples below
      [ "${NCU_SRC:-0}" = 2 ] ||
        run ncuencsrc $NCU --clock-control none --kernel-name regex:"${NCU_KERNELS:-conv_block_kernel|ffn_wg_kernel}" \
          --launch-count "${NCU_LAUNCHES:-4}" \
          --section InstructionStats --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis \
          $B/cuda_decode_bench --preset 7b --bf16 --no-gemv --prompt 16 --tokens 4 --enc-audio 60 --enc-reps 1 \
          --job-audio 1 --job-tokens 1
      # NCU_SRC=1 (or 2): the per-SASS-instruction stall samples of the first matching launch after $NCU_SKIP (0)
      # (the source page as CSV, summarised by ncu_sass_summary.py into steps.txt), with the launch's details
      if [ "${NCU_SRC:-0}" != 0 ]; then
        NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
        run ncuencsrc_src timeout 300 $NCU --clock-control none \
          --kernel-name regex:"${NCU_KERNELS:-conv_block_kernel|ffn_wg_kernel}" --launch-skip "${NCU_SKIP:-0}" \
          --launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight \
          --section LaunchStats --section Occupancy --section SchedulerStats --section InstructionStats \
          --section ComputeWorkloadAnalysis -o "$OUT/ncuencsrc" -f $B/cuda_decode_bench --preset 7b --bf16 \
          --no-gemv --prompt 16 --tokens 4 --enc-audio 60 --enc-reps 1 --job-audio 1 --job-tokens 1
        $NCU --import "$OUT/ncuencsrc.ncu-rep" --page source --csv --print-source sass >"$OUT/ncuenc_sass.csv" 2>&1
        $NCU --import "$OUT/ncuencsrc.ncu-rep" --page details >"$OUT/ncuenc_details.txt" 2>&1
        rm -f "$OUT/ncuencsrc.ncu-rep"
        python3 scripts/device/ncu_sass_summary.py "$OUT/ncuenc_sass.csv" --top 40 --runs 30 2>&1 |
          sed "s/^/ncuenc_sass /" | tee -a "$OUT/steps.txt"
      fi ;;
    ncuenckern)
      NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      run ncuenckern timeout 400 $NCU --clock-control none --cache-control none --csv \
        --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size --launch-count 4000 \
        $B/cuda_decode_bench --preset 7b --bf16 --no-gemv --prompt 16 --tokens 4 --enc-audio 60 --enc-reps 1 \
        --job-audio 1 --job-tokens 1
      python3 scripts/device/ncu_kernel_table.py "$OUT/ncuenckern.log" --runs 3 2>&1 | sed 's/^/ncuenckern /' |
        tee -a "$OUT/steps.txt" ;;
    ncuprefill)  # every kernel's duration (Nsight Compute, clocks and caches left alone) of the prefill's
      # kind (GEMMs, packs, norms, attention) in the warm-up (256 rows) and the timed 1,024-row prefill;
      # then the flash kernel's sections on one layer of the timed prefill
      NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
      run ncuprefill $NCU --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
        --kernel-name regex:'nvjet|flash|pack|rms|silu|rope|attn|split|gemm' --launch-count 700 \
        $B/cuda_decode_bench --preset 7b --bf16 --no-gemv --tokens 2 --enc-audio 1 --job-audio 1 --job-tokens 1
      run ncuflash $NCU --clock-control none --kernel-name regex:flash_prefill --launch-skip 14 --launch-count 1 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
        --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis \
        $B/cuda_decode_bench --preset 7b --bf16 --no-gemv --tokens 2 --enc-audio 1 --job-audio 1 --job-tokens 1 ;;
    table1k) run table1k $B/cuda_decode_bench --preset 7b --bf16 --table-only --gemv-m 1024 ;;
    roofline) run roofline python3 $VV_DEV/golden/decode_roofline.py 1 8 64 128 ;;
    reference)
      run reference env PYTHONPATH=$VV_REF_PYTHONPATH:$VV_DEV/golden python3 scripts/device/reference_batched.py \
        --batches "$REF_BATCHES" ;;
    benchref)  # bench_reference.py itself (encoders over 60 s, prefill 1K/4K, decode, the standard job warm and
      # cold): the same-call figures issue 11's ratios are taken against; batch 1 only ($BENCHREF_BATCHES), 2 reps
      run benchref timeout "${BENCHREF_TIMEOUT:-480}" env PYTHONPATH=$VV_REF_PYTHONPATH:$VV_DEV/golden \
        python3 $VV_DEV/golden/bench_reference.py --device cuda --reps 2 --batches "${BENCHREF_BATCHES:-1}" ;;
    curve) run curve $B/engine_loop_bench --preset 7b --device cuda --bf16 --audio 30 --tokens "$CURVE_TOKENS" \
      --concurrency "${CURVE_N:-1,2,4,8,16,32,64,128}" ;;
    curvelp)  # the curve's $CURVE_N (1,64,128) points for requests whose logits the host reads and for the
      # greedy logprobs the device gives: greedy (no forced ids), greedy with logprobs (device), forced ids
      # with logprobs (logits to the host), sampled at temperature 1 (logits to the host); each point's
      # "host between execute() calls" line shows what the host adds a step
      for cfg in "free:--free" "freelp:--free --logprobs" "forcedlp:--logprobs" "sample:--sample 1"; do
        read -ra extra <<<"${cfg#*:}"
        run "curvelp_${cfg%%:*}" $B/engine_loop_bench --preset 7b --device cuda --bf16 --audio 30 \
          --tokens "$CURVE_TOKENS" --concurrency "${CURVE_N:-1,64,128}" "${extra[@]}"
      done ;;
    curveab)  # the curve at $CURVE_N (64,128) with each of $CURVE_CFGS (';'-separated; 'plain' = none),
      # $CURVE_REPS (3) rounds interleaved, the order of the configurations reversed every other round;
      # summarize.py gives each one's median per point
      IFS=';' read -ra ccfgs <<<"${CURVE_CFGS:-plain}"
      for i in $(seq "${CURVE_REPS:-3}"); do
        order=("${ccfgs[@]}")
        if ((i % 2 == 0)); then
          order=()
          for ((k = ${#ccfgs[@]} - 1; k >= 0; --k)); do order+=("${ccfgs[k]}"); done
        fi
        for cfg in "${order[@]}"; do
          read -ra kv <<<"${cfg/plain/VV_CUDA_NONE=1}"
          run "curve_${cfg//[^A-Za-z0-9]/_}_r$i" timeout 300 env "${kv[@]}" $B/engine_loop_bench --preset 7b \
            --device cuda --bf16 --audio 30 --tokens "$CURVE_TOKENS" --concurrency "${CURVE_N:-64,128}"
        done
      done ;;
    curvepad)  # decode steps padded to buckets (the default on CUDA) against unpadded (--pad 0): the curve at
      # $CURVE_N (16,32,64,128), $CURVE_REPS (2) rounds interleaved, the order reversed every other round
      for i in $(seq "${CURVE_REPS:-2}"); do
        order=(8 0)
        ((i % 2 == 0)) && order=(0 8)
        for p in "${order[@]}"; do
          run "curve_pad${p}_r$i" timeout 300 $B/engine_loop_bench --preset 7b --device cuda --bf16 --audio 30 \
            --tokens "$CURVE_TOKENS" --concurrency "${CURVE_N:-16,32,64,128}" --pad "$p"
        done
      done ;;
    profile) run profile env VV_CUDA_PROFILE=1 $B/engine_loop_bench --preset 7b --device cuda --bf16 --audio 30 \
      --tokens 400 --concurrency 64 ;;
    ttft) run ttft $B/engine_loop_bench --preset 7b --device cuda --bf16 --audio 5 --tokens 256 --ttft-probe 300 ;;
    invariance) run invariance $B/engine_loop_bench --preset 7b --device cuda --bf16 --invariance 8 --audio 10 \
      --tokens 32 ;;
    attn)
      for cfg in "regs" "stream" "stream VV_CUDA_MMA_DECODE_WARPS=4" "stream VV_CUDA_MMA_DECODE_WARPS=1"; do
        read -ra kv <<<"$cfg"
        run "attn_${cfg//[^A-Za-z0-9]/_}" env VV_CUDA_MMA_DECODE="${kv[0]}" "${kv[@]:1}" \
          $B/cuda_decode_bench --attn-bench
      done ;;
    deterministic)
      run invariance_det $B/engine_loop_bench --preset 7b --device cuda --bf16 --deterministic --invariance 8 \
        --audio 10 --tokens 32
      run curve_det $B/engine_loop_bench --preset 7b --device cuda --bf16 --deterministic --audio 30 \
        --tokens "$CURVE_TOKENS" --concurrency 1,64,128 ;;
    detws)  # deterministic mode's GEMMs on the ws form (VV_CUDA_DETERMINISTIC_GEMM=ws): its gpu test, the
      # invariance check with it, and the curve's $CURVE_N (1,64,128) points: default, deterministic
      # (skinny GEMMs), deterministic on the ws form, in one call (the cost of each)
      run detws_tests timeout 300 env VV_REQUIRE_GPU=1 $B/unit_kernels_cuda \
        --gtest_filter='CudaStreamGemm.Deterministic*'
      run invariance_detws env VV_CUDA_DETERMINISTIC_GEMM=ws $B/engine_loop_bench --preset 7b --device cuda --bf16 \
        --deterministic --invariance 8 --audio 10 --tokens 32
      for cfg in plain det detws; do
        denv=(VV_CUDA_NONE=1)
        dflag=()
        [ $cfg = plain ] || dflag=(--deterministic)
        [ $cfg = detws ] && denv=(VV_CUDA_DETERMINISTIC_GEMM=ws)
        run "curve_$cfg" env "${denv[@]}" $B/engine_loop_bench --preset 7b --device cuda --bf16 ${dflag[@]+"${dflag[@]}"} \
          --audio 30 --tokens "$CURVE_TOKENS" --concurrency "${CURVE_N:-1,64,128}"
      done ;;
    *) echo "unknown step $step" | tee -a "$OUT/steps.txt" ;;
  esac
done
trap - TERM INT
finish
