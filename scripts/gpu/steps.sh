#!/usr/bin/env bash
# One run's worth of GPU work, each step under its own time limit, logs under $OUT.
#   bash scripts/gpu/steps.sh STEP[:SECONDS] ...     (repo root, on the GPU machine)
# Steps: tests (the GPU test suite), kernel (bench_potrs.py, kernel path, 8192 32768 65536; its
#        records' `solve` says whether the tiled solve or cuSOLVERMp's potrs ran), kernel12 (the
#        same on the 1 x 2 mesh grid), api (bench_potrs.py --api, with plain JAX on one GPU), autodiff (bench_autodiff.py --nproc 2), big131 / big164
#        (bench_potrs.py --api at 131072 / 163840), cases1 / cases2 (native_cases.py, 1 / 2 processes),
#        grads2 (the derivative and module cases of native_cases.py, 2 processes),
#        lu1 / lu2 (the LU cases of native_cases.py, 1 / 2 processes; LU_CASES filters lu2),
#        lubench (bench_lu.py on the mesh grid $LU_GRID, default 2,1, T_A=1024, $LU_SIZES, default
#        16384 65536), lubig (bench_lu.py at $LU_BIG, default 98304 131072, one run each in a process
#        of its own), luengine (the engine's getrf+getrs, benchmarks/engine/engine_ops.sh, at $LU_ENGINE_SIZES (default $LU_SIZES), T=1024, on "NRANKS NPROW" =
#        $LU_ENGINE, default "2 1": cuSOLVERMp's 1x2 grid, which a (2,1) mesh grid is).
#        eager2 (eager jax.grad of potrs and lu_solve, check_grads order 2 of potrs, logdet and
#        cholesky: native_cases.py, 2 processes).
#        qr1 / qr2 (the QR and least-squares cases of native_cases.py, 1 / 2 processes), qrbench
#        (bench_qr.py: qr at $QR_N, default 32768, least_squares at M = 2N), qrengine (the engine's
#        geqrf, engine_ops.sh, at $QR_N on one GPU).
#        eig1 / eig2 (the eig-/sygvd-/polar-/svd- cases of native_cases.py, 1 / 2
#        processes), eigbench (bench_eig.py, $EIG_SIZES, default 8192, tiles $EIG_TILES, default
#        256 512 1024, with jnp.linalg.eigh), eigengine (the engine's syevd, engine_ops.sh, same sizes
#        and tiles, one GPU).
#        profile (bench_potrs.py --api on $PROFILE_GRID at $PROFILE_SIZES, one more call traced with
#        jax.profiler: the Perfetto traces come back as $OUT/traceK.json.gz, summarized by
#        benchmarks/trace_summary.py in the step's log).
#        long (bench_long_runs.py on the native backend: $LONG_CALLS (1000) eager calls per case at
#        N = $LONG_N (4096), $LONG_NPROC (1) processes, cases $LONG_CASES (fast: all but eager grads);
#        RSS, live arrays, jaxmg's caches, GPU bytes in use and the native grid cache before and after).
#        engine (the engine from C++ with no JAX, benchmarks/engine/engine_ops.sh: ENGINE holds its
#        configurations "NRANKS NPROW M N T OP [MAPPING]", ';'-separated; ENGINE_REPS timed runs).
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
    lu1) cmd=(env JAXMG_CASES=lu python3 scripts/gpu/launch.py -n 1 tests/gpu/native_cases.py) ;;
    lu2) cmd=(env JAXMG_CASES=${LU_CASES:-lu} python3 scripts/gpu/launch.py -n 2 tests/gpu/native_cases.py) ;;
    lubench) cmd=(python3 benchmarks/bench_lu.py --grid "${LU_GRID:-2,1}" --sizes ${LU_SIZES:-16384 65536} --out "$RES") ;;
    lubig) cmd=(bash -c "for n in ${LU_BIG:-98304 131072}; do python3 benchmarks/bench_lu.py --grid ${LU_GRID:-2,1} \
                         --sizes \$n --runs 1 --out $RES; done") ;;
    eig1) cmd=(env JAXMG_CASES=eig-,sygvd-,polar-,svd- python3 scripts/gpu/launch.py -n 1 tests/gpu/native_cases.py) ;;
    eig2) cmd=(env JAXMG_CASES=eig-,sygvd-,polar-,svd- python3 scripts/gpu/launch.py -n 2 tests/gpu/native_cases.py) ;;
    eigbench) cmd=(python3 benchmarks/bench_eig.py --sizes ${EIG_SIZES:-8192} --tiles ${EIG_TILES:-256 512 1024}
                   --out "$RES") ;;
    eigengine) configs=()
               for n in ${EIG_SIZES:-8192}; do for t in ${EIG_TILES:-256 512 1024}; do
                   configs+=("1 1 $n $n $t syevd"); done; done
               cmd=(env EXTRA="$EXTRA" REPS=3 bash benchmarks/engine/engine_ops.sh "${configs[@]}") ;;
    luengine) configs=()
              for n in ${LU_ENGINE_SIZES:-${LU_SIZES:-16384 65536}}; do
                  configs+=("${LU_ENGINE:-2 1} $n $n 1024 getrf"); done
              cmd=(env EXTRA="$EXTRA" REPS=${LU_REPS:-3} bash benchmarks/engine/engine_ops.sh "${configs[@]}") ;;
    eager2) cmd=(env JAXMG_CASES=public-eager-grad,public-check-grads
                 python3 scripts/gpu/launch.py -n 2 tests/gpu/native_cases.py) ;;
    qr1) cmd=(env JAXMG_CASES=qr,lstsq python3 scripts/gpu/launch.py -n 1 tests/gpu/native_cases.py) ;;
    qr2) cmd=(env JAXMG_CASES=qr,lstsq python3 scripts/gpu/launch.py -n 2 tests/gpu/native_cases.py) ;;
    qrbench) cmd=(python3 benchmarks/bench_qr.py --n ${QR_N:-32768} --out "$RES") ;;
    qrengine) cmd=(env EXTRA="$EXTRA" REPS=3 bash benchmarks/engine/engine_ops.sh
                   "1 1 ${QR_N:-32768} ${QR_N:-32768} ${QR_T:-1024} geqrf") ;;
    engine) IFS=';' read -ra configs <<<"${ENGINE:?set ENGINE to configurations of benchmarks/engine/engine_ops.sh, ';'-separated}"
            cmd=(env OUTFILE="$RES" REPS="${ENGINE_REPS:-3}" bash benchmarks/engine/engine_ops.sh "${configs[@]}") ;;
    profile) cmd=(bash -c "python3 benchmarks/bench_potrs.py --api --grid ${PROFILE_GRID:-2,1} --sizes ${PROFILE_SIZES:-32768} \
                           --no-single --profile /tmp/jaxmg-prof --out $RES && i=0 && \
                           for f in \$(find /tmp/jaxmg-prof -name perfetto_trace.json.gz); do i=\$((i+1)); \
                             cp \$f $OUT/trace\$i.json.gz; echo \$f; python3 benchmarks/trace_summary.py \$f --top 15; done") ;;
    long) cmd=(python3 scripts/gpu/launch.py -n "${LONG_NPROC:-1}" benchmarks/bench_long_runs.py --backend native
               --n "${LONG_N:-4096}" --calls "${LONG_CALLS:-1000}" --cases "${LONG_CASES:-fast}" --out "$RES") ;;
    kernel) cmd=(python3 benchmarks/bench_potrs.py --sizes 8192 32768 65536 --no-single --out "$RES") ;;
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
