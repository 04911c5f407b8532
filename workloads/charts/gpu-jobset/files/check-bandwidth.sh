#!/bin/sh
# Usage: check-bandwidth.sh <nccl-tests output> <minimum bus bandwidth, GB/s>
# Reads the out-of-place bus bandwidth (column 8) of the largest message size
# in an nccl-tests result table; exits 1 below the minimum, 2 when the output
# has no result rows (the benchmark did not run).
awk -v min="$2" '
  $1 ~ /^[0-9]+$/ && NF >= 8 && $8 ~ /^[0-9.]+$/ {
    if ($1 + 0 >= size) { size = $1 + 0; bw = $8 + 0 }
  }
  END {
    if (size == 0) { print "FAIL: no result rows in the NCCL output"; exit 2 }
    printf "largest message %.0f bytes: bus bandwidth %.2f GB/s (minimum %.2f GB/s)\n", size, bw, min
    if (bw < min + 0) { print "FAIL: bus bandwidth below the minimum"; exit 1 }
    print "PASS"
  }' "$1"
