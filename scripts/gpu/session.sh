#!/usr/bin/env bash
# One device call's worth of GPU work, each step under its own time limit, logs under $OUT.
#   bash scripts/gpu/session.sh STEP[:SECONDS] ...     (repo root, on the lent GPU machine)
# Steps: tests (the GPU test suite), kernel (bench_potrs.py, kernel path, 8192 32768 65536),
#        kernel-mp (the same with cuSOLVERMp's own potrs solve), api (bench_potrs.py --api, with
#        plain JAX on one GPU), autodiff (bench_autodiff.py --nproc 2), big131 / big164
#        (bench_potrs.py --api at 131072 / 163840), cases1 / cases2 (native_cases.py, 1 / 2 processes),
#        grads2 (the derivative and module cases of native_cases.py, 2 processes).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/jaxmg-out}
mkdir -p "$OUT"
source scripts/gpu/setup.sh > "$OUT/setup.log" 2>&1; cat "$OUT/setup.log"
RES="$OUT/results.jsonl"
for spec in "$@"; do
  step=${spec%%:*}; limit=${spec#*:}; [ "$limit" = "$spec" ] && limit=300
  echo "=== $step (limit ${limit}s) $(date +%T)"
  case $step in
    tests) cmd=(python3 -m pytest -q -rs -m gpu tests/gpu) ;;
    cases1) cmd=(python3 scripts/gpu/launch.py -n 1 tests/gpu/native_cases.py) ;;
    cases2) cmd=(python3 scripts/gpu/launch.py -n 2 tests/gpu/native_cases.py) ;;
    grads2) cmd=(env JAXMG_CASES=public-check-grads,public-grad,public-module
                 python3 scripts/gpu/launch.py -n 2 tests/gpu/native_cases.py) ;;
    kernel) cmd=(python3 benchmarks/bench_potrs.py --sizes 8192 32768 65536 --no-single --out "$RES") ;;
    kernel-mp) cmd=(env JAXMG_NATIVE_SOLVE=cusolvermp python3 benchmarks/bench_potrs.py --sizes 8192 32768
                    --no-single --out "$RES") ;;
    kernel-tiled) cmd=(env JAXMG_NATIVE_SOLVE=tiled python3 benchmarks/bench_potrs.py --sizes 8192 32768
                       --no-single --out "$RES") ;;
    kernel12) cmd=(python3 benchmarks/bench_potrs.py --grid 1,2 --sizes 8192 32768 65536 --no-single --out "$RES") ;;
    api) cmd=(python3 benchmarks/bench_potrs.py --api --sizes 8192 32768 65536 --out "$RES") ;;
    big131) cmd=(python3 benchmarks/bench_potrs.py --api --sizes 131072 --runs 1 --no-single --out "$RES") ;;
    big164) cmd=(python3 benchmarks/bench_potrs.py --api --sizes 163840 --runs 1 --no-single --out "$RES") ;;
    autodiff) cmd=(python3 benchmarks/bench_autodiff.py --nproc 2 --n 32768 --vmap-n 16384 --out "$RES") ;;
    *) echo "unknown step $step"; continue ;;
  esac
  timeout -k 10 "$limit" "${cmd[@]}" > "$OUT/$step.log" 2>&1
  echo "rc=$? $(date +%T)"; tail -n 25 "$OUT/$step.log" | cut -c1-400
done
