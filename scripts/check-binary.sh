#!/usr/bin/env bash
# Checks that the meshdrain binary is what a pod can carry: statically linked and small,
# because it is copied into every pod by an init container.
set -euo pipefail
bin=${1:-bin/meshdrain}
# The guide's limit: the binary is copied into every pod, but correctness beats bytes.
max_bytes=$((12 * 1024 * 1024))
size=$(stat -c %s "$bin")
# A dynamically linked ELF names its loader (PT_INTERP); ldd says so too where it exists.
if grep -qaE '/lib(64)?/ld-(linux|musl)' "$bin"; then
  echo "FAIL: $bin names a dynamic loader (is CGO_ENABLED=0?)"; exit 1
fi
if command -v ldd >/dev/null && ldd "$bin" >/dev/null 2>&1; then
  echo "FAIL: $bin is dynamically linked:"; ldd "$bin"; exit 1
fi
if [ "$size" -gt "$max_bytes" ]; then
  echo "FAIL: $bin is $size bytes, more than $max_bytes"; exit 1
fi
awk -v b="$bin" -v s="$size" 'BEGIN { printf "binary ok: %s is static, %d bytes (%.2f MiB, limit 12 MiB)\n", b, s, s/1048576 }'
