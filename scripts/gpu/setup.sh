# Source on a GPU machine (repo root): installs the wheels (.whl: cuSOLVERMp 0.8, beartype),
# sets the library paths and NVLink-multicast-off variables, and builds jaxmg._native into jaxmg/.
#   source scripts/gpu/setup.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
SITE=$(python3 -c "import site; print(site.getsitepackages()[0])")
EXTRA=${JAXMG_EXTRA:-/tmp/jaxmg-extra}
mkdir -p "$EXTRA"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$EXTRA" .whl/*.whl || return 1 2>/dev/null || exit 1
fi
export PYTHONPATH="$PWD:$EXTRA${PYTHONPATH:+:$PYTHONPATH}"
export LD_LIBRARY_PATH="$EXTRA/nvidia/cu13/lib:$SITE/nvidia/nccl/lib:$SITE/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
BUILD=${JAXMG_BUILD:-/tmp/jaxmg-build}
t0=$(date +%s)
JAXMG_INCLUDE_DIRS="$EXTRA/nvidia/cu13/include:$SITE/nvidia/nccl/include:$SITE/nvidia/cu13/include" \
  cmake -S . -B "$BUILD" -G Ninja -DPython_EXECUTABLE="$(command -v python3)" \
  -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_BUILD_TYPE=Release >"$BUILD.cmake.log" 2>&1 \
  && ninja -C "$BUILD" >"$BUILD.ninja.log" 2>&1 \
  && cp "$BUILD"/csrc/_native*.so jaxmg/ \
  && echo "jaxmg._native built in $(( $(date +%s) - t0 ))s" \
  || { echo "BUILD FAILED"; tail -40 "$BUILD.cmake.log" "$BUILD.ninja.log"; }
