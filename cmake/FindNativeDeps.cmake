# Finds what the native target needs: nvcc/CUDA runtime headers, cusolverMp.h, nccl.h, cusolverDn.h,
# and XLA's FFI headers (jax.ffi.include_dir()). Sets JAXMG_NATIVE_DEPS_FOUND, JAXMG_NATIVE_MISSING and
# JAXMG_NATIVE_INCLUDE_DIRS. Extra header folders can be given with the environment variable
# JAXMG_INCLUDE_DIRS (a ';' or ':' separated list); the nvidia-* pip wheels' include folders in the
# build's Python site-packages are searched too.
set(JAXMG_NATIVE_DEPS_FOUND FALSE)
set(JAXMG_NATIVE_MISSING "")

if(DEFINED ENV{JAXMG_DISABLE_NATIVE})
  set(JAXMG_NATIVE_MISSING "JAXMG_DISABLE_NATIVE is set")
  return()
endif()

# Every folder the build's Python imports from: its site-packages and, inside pip's isolated
# build environment (where the CUDA header wheels of build_support/jaxmg_build.py land), the
# environment's own folders on sys.path, which site.getsitepackages() does not list.
execute_process(
  COMMAND "${Python_EXECUTABLE}" -c "import os,site,sys; print(';'.join(dict.fromkeys([p for p in sys.path+site.getsitepackages()+[site.getusersitepackages()] if p and os.path.isdir(p)])))"
  OUTPUT_VARIABLE _jaxmg_sites OUTPUT_STRIP_TRAILING_WHITESPACE)

# nvcc: CUDACXX / PATH as CMake searches them, else the nvidia-cuda-nvcc wheel's.
if(NOT DEFINED ENV{CUDACXX} AND NOT CMAKE_CUDA_COMPILER)
  find_program(_jaxmg_path_nvcc nvcc NO_CACHE)
  if(NOT _jaxmg_path_nvcc)
    foreach(_site ${_jaxmg_sites})
      file(GLOB _wheel_nvcc "${_site}/nvidia/cu1[0-9]/bin/nvcc" "${_site}/nvidia/cuda_nvcc/bin/nvcc")
      if(_wheel_nvcc)
        list(GET _wheel_nvcc 0 _wheel_nvcc)
        set(CMAKE_CUDA_COMPILER "${_wheel_nvcc}" CACHE FILEPATH "nvcc from the nvidia-cuda-nvcc wheel")
        get_filename_component(_wheel_cuda_root "${_wheel_nvcc}" DIRECTORY)
        get_filename_component(_wheel_cuda_root "${_wheel_cuda_root}" DIRECTORY)
        set(CUDAToolkit_ROOT "${_wheel_cuda_root}")
        break()
      endif()
    endforeach()
  endif()
endif()

include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  set(JAXMG_NATIVE_MISSING "no CUDA compiler (nvcc) found")
  return()
endif()
find_package(CUDAToolkit QUIET)
if(NOT CUDAToolkit_FOUND)
  set(JAXMG_NATIVE_MISSING "no CUDA toolkit found")
  return()
endif()

set(_jaxmg_hints "")
if(DEFINED ENV{JAXMG_INCLUDE_DIRS})
  string(REPLACE ":" ";" _env_dirs "$ENV{JAXMG_INCLUDE_DIRS}")
  list(APPEND _jaxmg_hints ${_env_dirs})
endif()
foreach(_site ${_jaxmg_sites})
  file(GLOB _wheel_includes "${_site}/nvidia/*/include")
  list(APPEND _jaxmg_hints ${_wheel_includes})
endforeach()
list(APPEND _jaxmg_hints ${CUDAToolkit_INCLUDE_DIRS})

set(JAXMG_NATIVE_INCLUDE_DIRS "")
foreach(_header cusolverMp.h nccl.h cusolverDn.h cublas_v2.h)
  string(MAKE_C_IDENTIFIER "${_header}" _var)
  find_path(JAXMG_HDR_${_var} ${_header} HINTS ${_jaxmg_hints} NO_CACHE)
  if(NOT JAXMG_HDR_${_var})
    set(JAXMG_NATIVE_MISSING "${_header} not found; install nvidia-cusolvermp-cu13, nvidia-nccl-cu13 and nvidia-cusolver or set JAXMG_INCLUDE_DIRS")
    return()
  endif()
  list(APPEND JAXMG_NATIVE_INCLUDE_DIRS "${JAXMG_HDR_${_var}}")
endforeach()

execute_process(
  COMMAND "${Python_EXECUTABLE}" -c "import jax.ffi; print(jax.ffi.include_dir())"
  OUTPUT_VARIABLE JAXMG_XLA_FFI_INCLUDE OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _ffi_rc)
if(NOT _ffi_rc EQUAL 0)
  set(JAXMG_NATIVE_MISSING "jax is not importable at build time, so XLA's FFI headers were not found")
  return()
endif()
list(APPEND JAXMG_NATIVE_INCLUDE_DIRS "${JAXMG_XLA_FFI_INCLUDE}")
list(REMOVE_DUPLICATES JAXMG_NATIVE_INCLUDE_DIRS)
set(JAXMG_NATIVE_DEPS_FOUND TRUE)
