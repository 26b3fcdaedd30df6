#!/bin/bash
# Spark with GPU worker daemons on the GPU node, as run for docs/BENCHMARKS.md and issue 21.
# PySpark and Java must be staged first (../shared/device/spark-stage.sh, then in the same
# warm machine: source /tmp/spark/env.sh). Writes to $OUT (default out/spark): one .log per
# run, .md tables; a failed run does not stop the others.
# Usage: bash tests/gpu/run_spark.sh tests|bench|all
set -u
OUT=${OUT:-out/spark}
# iproute2 for the namespace hosts of test_spark_hosts_gpu.py, where tests/gpu/stage_ip.sh staged it
# (the project root; this script may run from a copy of the tree inside it)
for d in "$PWD/.device-ip" "$PWD/../.device-ip"; do
    if [ -x "$d/bin/ip" ]; then export PATH="$d/bin:$PATH"; break; fi
done
mkdir -p "$OUT"
export INSITU_COMMIT=${INSITU_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
# The runtime finds kernels, GL contexts and colormaps through entry points: install the metadata.
PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . > "$OUT/pip.log" 2>&1
run() {  # name, seconds, command...
    local name=$1 secs=$2; shift 2
    local t0=$SECONDS
    timeout "$secs" "$@" > "$OUT/$name.log" 2>&1
    echo "$name: exit $? in $((SECONDS - t0)) s" | tee -a "$OUT/summary.txt"
}
what=${1:-all}
if [ "$what" = tests ] || [ "$what" = all ]; then
    run spark_gpu_tests 480 python3 -m pytest -q -rA -s tests/gpu/test_spark_gpu.py tests/gpu/test_spark_adaptor_gpu.py \
        tests/gpu/test_spark_hosts_gpu.py \
        tests/test_spark_serving.py
    run spark_nojava 150 env -u JAVA_HOME python3 -m pytest -q -rA tests/test_spark_nojava.py
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
    run bench_spark_32 150 python3 tests/gpu/bench_spark.py --n 32 --backend cupy --md "$OUT/bench_spark.md"
    run bench_spark_128 200 python3 tests/gpu/bench_spark.py --n 128 --iterations 20 --backend cupy --md "$OUT/bench_spark.md"
    run bench_spark_adaptor 300 python3 tests/gpu/bench_spark_adaptor.py --n 128 256 512 --backend cupy \
        --md "$OUT/bench_spark_adaptor.md"
fi
