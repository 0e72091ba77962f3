#!/usr/bin/env bash
# The engine's own speed (cuSOLVERMp from C++, no JAX): builds engine_ops.cu, then runs each
# configuration with one process per GPU and prints one JSON line per configuration.
#   EXTRA=<folder holding the cuSOLVERMp wheel's files> bash benchmarks/engine/engine_ops.sh \
#       "NRANKS NPROW M N T OP [MAPPING]" ...
#   e.g. "1 1 32768 32768 1024 qr" "2 2 65536 32768 1024 lstsq row" "2 1 98304 98304 1024 getrf"
# OP: potrf | getrf (getrf + getrs) | geqrf | qr (geqrf + orgqr) | lstsq (geqrf + ormqr) | gels | syevd;
# MAPPING: col (default) or row. Env: REPS (timed runs after one warm-up, default 3), DT (d|s),
# TO (seconds per configuration, default 600), OUTFILE (also append the lines there), QUERY_EACH_REP
# (1: query getrf's workspace before each getrf, as jaxmg does; with REPS=300 at N=4096 this splits a
# host-memory growth between getrf and its bufferSize query: rss_growth_kib_per_rep).
# scripts/gpu/setup.sh installs the wheel into /tmp/jaxmg-extra, the default EXTRA.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
here=$(cd "$(dirname "$0")" && pwd)
EXTRA=${EXTRA:-/tmp/jaxmg-extra}
SP=$(python3 -c "import site; print(site.getsitepackages()[0])")
W=$(mktemp -d)
nvcc -std=c++17 -O2 -arch=sm_90 -I"$EXTRA/nvidia/cu13/include" -I"$SP/nvidia/cu13/include" -I"$SP/nvidia/nccl/include" \
  "$here/engine_ops.cu" -o "$W/engine_ops" -L"$EXTRA/nvidia/cu13/lib" -L"$SP/nvidia/nccl/lib" -L"$SP/nvidia/cu13/lib" \
  -l:libcusolverMp.so.0 -l:libnccl.so.2 || exit 1
export LD_LIBRARY_PATH="$EXTRA/nvidia/cu13/lib:$SP/nvidia/nccl/lib:$SP/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
status=0
for config in "$@"; do
  read -r nranks nprow m n t op mapping <<<"$config"
  id="$W/id.$RANDOM"; pids=()
  for r in $(seq 0 $((nranks - 1))); do
    timeout "${TO:-600}" "$W/engine_ops" "$r" "$nranks" "$id" "$nprow" "$m" "$n" "$t" "${DT:-d}" "${REPS:-3}" "$op" \
      "${mapping:-col}" > "$W/out.$r" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  cat "$W/out.0"
  [ -n "${OUTFILE:-}" ] && cat "$W/out.0" >> "$OUTFILE"
done
exit $status
