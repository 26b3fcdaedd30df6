#!/bin/bash
# The end-to-end benchmark's tables on a 2-GPU node (nvidia-h200-x2), as run for
# docs/BENCHMARKS.md, plus the GPU tests of the code it exercises. Writes to $OUT
# (default out/bench): one .md table and one .log per run; a failed run does not stop
# the others. Usage: bash tests/gpu/run_bench_insitu.sh [quick]
set -u
OUT=${OUT:-out/bench}
mkdir -p "$OUT"
export INSITU_COMMIT=${INSITU_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
ONE="env CUDA_VISIBLE_DEVICES=0 python3 examples/bench_insitu.py"
TWO="mpirun -n 2 --bind-to none python3 examples/bench_insitu.py"
run() {  # name, seconds, command...
    local name=$1 secs=$2; shift 2
    local t0=$SECONDS
    timeout "$secs" "$@" > "$OUT/$name.log" 2>&1
    echo "$name: exit $? in $((SECONDS - t0)) s" | tee -a "$OUT/summary.txt"
}
run tests 200 python3 -m pytest -q tests/gpu/test_eikonal_gpu.py tests/gpu/test_adaptor_gpu.py tests/gpu/test_image_gpu.py tests/gpu/test_contour_gpu.py tests/gpu/test_surface_gpu.py
SIZES="512 1024 1344" WEAK=1024 BULB="1024 2048" VOL=1024 RES="512 1024 2048 4096"
# quick: the same runs at toy sizes (to try the script on a CPU machine)
[ "${1:-}" = quick ] && SIZES="24" WEAK=16 BULB="24" VOL=24 RES="32 48"
run insitu_1gpu 150 $ONE insitu --n $SIZES --hand-off float32 fused --slowness float32 --md "$OUT/insitu_1gpu.md"
run insitu_2gpu 150 $TWO insitu --n $SIZES --hand-off float32 fused --slowness float32 --md "$OUT/insitu_2gpu.md"
run insitu_weak 90 $TWO insitu --n $WEAK --weak --hand-off fused --slowness float32 --md "$OUT/insitu_weak.md"
run mandelbulb_1gpu 90 $ONE mandelbulb --n $BULB --md "$OUT/mandelbulb_1gpu.md"
run mandelbulb_2gpu 90 $TWO mandelbulb --n $BULB --md "$OUT/mandelbulb_2gpu.md"
run volume_1gpu 60 $ONE volume --n $VOL --res $RES --md "$OUT/volume_1gpu.md"
run volume_2gpu 60 $TWO volume --n $VOL --res $RES --md "$OUT/volume_2gpu.md"
