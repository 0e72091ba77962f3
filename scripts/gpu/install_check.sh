#!/usr/bin/env bash
# GPU machine: the install path as far as a machine without network allows.
#   bash scripts/gpu/install_check.sh      (repo root; the .whl folder carries cuSOLVERMp 0.8 and lineax)
# 1. what the build backend would fetch here (the GPU is detected from the driver files);
# 2. a wheel built with the native module (no build isolation: no network here), its tag;
# 3. python -m jaxmg.info with it (native backend available, potrs native);
# 4. a pure build (JAXMG_CUDA=0): py3-none-any, and `import jaxmg` from it warns once on this GPU machine;
# 5. jaxmg.lineax on the native backend (scripts/gpu/lineax_check.py).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
SITE=$(python3 -c "import site; print(site.getsitepackages()[0])")
EXTRA=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$EXTRA" .whl/*.whl || exit 1
export LD_LIBRARY_PATH="$EXTRA/nvidia/cu13/lib:$SITE/nvidia/nccl/lib:$SITE/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
step() { echo; echo "=== $*"; }

step "1. build requirements the backend adds on this machine"
python3 -c "import sys; sys.path.insert(0, 'build_support'); import jaxmg_build as b; print('driver', b._nvidia().driver_version()); print(b.native_requires())"

step "2. wheel with the native module (pip wheel --no-build-isolation)"
t0=$(date +%s)
JAXMG_INCLUDE_DIRS="$EXTRA/nvidia/cu13/include" python3 -m pip wheel -q --no-build-isolation --no-deps -w /tmp/wheels \
  -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90-real . 2>&1 | tail -5
echo "built in $(( $(date +%s) - t0 ))s: $(ls /tmp/wheels)"
python3 -m zipfile -l /tmp/wheels/*.whl | grep -E "_native|WHEEL"
python3 -m pip install -q --no-deps --no-compile --target /tmp/jaxmg-native /tmp/wheels/*.whl

step "3. python -m jaxmg.info (native wheel)"
(cd /tmp && PYTHONPATH="/tmp/jaxmg-native:$EXTRA" python3 -m jaxmg.info)

step "4. pure build (JAXMG_CUDA=0) and import jaxmg from it on this GPU machine"
JAXMG_CUDA=0 python3 -m pip wheel -q --no-build-isolation --no-deps -w /tmp/pure . 2>&1 | tail -3
echo "pure wheel: $(ls /tmp/pure)"
python3 -m pip install -q --no-deps --no-compile --target /tmp/jaxmg-pure /tmp/pure/*.whl
(cd /tmp && PYTHONPATH="/tmp/jaxmg-pure:$EXTRA" python3 -c "import jaxmg; import jaxmg.functional; print('imported', jaxmg.__file__)")
(cd /tmp && PYTHONPATH="/tmp/jaxmg-pure:$EXTRA" python3 -m jaxmg.info 2>/dev/null | sed -n '/native backend/,/^$/p;/potrs/p')

step "5. jaxmg.lineax on the native backend"
(cd /tmp && PYTHONPATH="/tmp/jaxmg-native:$EXTRA" python3 "$OLDPWD/scripts/gpu/lineax_check.py")
