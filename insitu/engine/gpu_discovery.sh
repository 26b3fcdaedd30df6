#!/bin/sh
# Spark GPU discovery script for insitu's Spark engine:
#   spark.{worker,executor}.resource.gpu.discoveryScript=<path of this file>
# Prints the node's GPUs as Spark's ResourceInformation JSON: {"name": "gpu", "addresses": ["0", "1"]}.
# $INSITU_GPU_ADDRESSES (comma-separated, e.g. "0,1") overrides what nvidia-smi reports
# (tests on machines without GPUs); no GPU: an empty list.
if [ -n "${INSITU_GPU_ADDRESSES+x}" ]; then
    list="$INSITU_GPU_ADDRESSES"
elif command -v nvidia-smi >/dev/null 2>&1; then
    list=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | tr -d ' ' | paste -sd, -)
else
    list=""
fi
addresses=$(printf '%s' "$list" | awk -F, '{for (i = 1; i <= NF; i++) if ($i != "") printf "%s\"%s\"", (n++ ? ", " : ""), $i}')
printf '{"name": "gpu", "addresses": [%s]}\n' "$addresses"
