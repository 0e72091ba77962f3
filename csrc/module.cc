// jaxmg._native: the native library's Python face (minimal: versions and capabilities).
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>

namespace nb = nanobind;

NB_MODULE(_native, m) {
  m.doc() = "jaxmg native library: XLA FFI handlers for cuSOLVERMp";
  m.def("cuda_runtime_version", []() {
    int version = 0;
    cudaRuntimeGetVersion(&version);
    return version;
  }, "The CUDA runtime version this module was built against (e.g. 13000).");
}
