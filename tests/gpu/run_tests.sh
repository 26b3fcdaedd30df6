#!/bin/bash
# The GPU tests in parts that each fit one device call (10 minutes): part K of N.
# Files are dealt out heaviest first (seconds measured on an H200, others counted as 15 s),
# each to the part with the least so far. Spark's and Catalyst's GPU tests need staging
# first and run from run_spark.sh / the Catalyst build instead.
# Writes $OUT/gpu_tests_K.log (every test's outcome, as it finishes) and prints the summary.
# Usage: bash tests/gpu/run_tests.sh K N      e.g. bash tests/gpu/run_tests.sh 1 3
set -u
K=${1:?part number, 1..N}
N=${2:?number of parts}
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
# The runtime finds kernels, GL contexts and colormaps through entry points: install the metadata.
PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . > "$OUT/pip.log" 2>&1
files=$(python3 - "$K" "$N" <<'EOF'
import glob, sys
k, n = int(sys.argv[1]), int(sys.argv[2])
skip = {"tests/gpu/test_spark_gpu.py", "tests/gpu/test_spark_adaptor_gpu.py", "tests/gpu/test_spark_hosts_gpu.py",
        "tests/gpu/test_catalyst_gpu.py"}
seconds = {"test_warmup_gpu": 135, "test_contour_gpu": 120, "test_queries_gpu": 35, "test_eikonal_filter_gpu": 25,
           "test_capi_gpu": 30, "test_adaptor_cells_gpu": 30, "test_cells_fields_gpu": 20, "test_cells_clip_gpu": 20}
files = sorted(f for f in glob.glob("tests/gpu/test_*.py") if f not in skip)
files.sort(key=lambda f: -seconds.get(f.split("/")[-1][:-3], 15))
parts = [[0, []] for _ in range(n)]
for f in files:
    p = min(parts, key=lambda p: p[0])
    p[0] += seconds.get(f.split("/")[-1][:-3], 15)
    p[1].append(f)
print(" ".join(sorted(parts[k - 1][1])))
EOF
)
echo "part $K of $N: $files"
timeout 560 python3 -m pytest -v -rfs -p no:cacheprovider --tb=short --durations=15 $files > "$OUT/gpu_tests_$K.log" 2>&1
echo "exit $?"
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_tests_$K.log" | tail -20
