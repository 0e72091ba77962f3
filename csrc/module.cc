// jaxmg._native: the native library's Python face. Handler capsules for jax.ffi.register_ffi_target,
// run-time loading of NCCL/cuSOLVERMp, versions, capabilities, timings and the grid cache.
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "dynload.h"
#include "handlers.h"
#include "watchdog.h"

namespace nb = nanobind;

namespace {

template <typename T>
nb::capsule handler_capsule(T* fn) {
  return nb::capsule(reinterpret_cast<void*>(fn), "xla._CUSTOM_CALL_TARGET");
}

// The handler capsules by target name.
void def_handlers(nb::module_& m) {
  m.def("handlers", []() {
    nb::dict d;
    d["jaxmg_identity"] = handler_capsule(jaxmg::jaxmg_identity);
    d["jaxmg_nccl_id"] = handler_capsule(jaxmg::jaxmg_nccl_id);
    d["jaxmg_potrf"] = handler_capsule(jaxmg::jaxmg_potrf);
    d["jaxmg_potrs"] = handler_capsule(jaxmg::jaxmg_potrs);
    d["jaxmg_getrf"] = handler_capsule(jaxmg::jaxmg_getrf);
    d["jaxmg_getrs"] = handler_capsule(jaxmg::jaxmg_getrs);
    d["jaxmg_geqrf"] = handler_capsule(jaxmg::jaxmg_geqrf);
    d["jaxmg_ormqr"] = handler_capsule(jaxmg::jaxmg_ormqr);
    d["jaxmg_orgqr"] = handler_capsule(jaxmg::jaxmg_orgqr);
    d["jaxmg_syevd"] = handler_capsule(jaxmg::jaxmg_syevd);
    d["jaxmg_sygvd"] = handler_capsule(jaxmg::jaxmg_sygvd);
    d["jaxmg_gemm"] = handler_capsule(jaxmg::jaxmg_gemm);
    d["jaxmg_trmm"] = handler_capsule(jaxmg::jaxmg_trmm);
    d["jaxmg_potri"] = handler_capsule(jaxmg::jaxmg_potri);
    return d;
  }, "FFI handler capsules by target name (register with platform='CUDA').");
}

// Loading NCCL and cuSOLVERMp, and what was loaded.
void def_loading(nb::module_& m) {
  m.def("load", [](const std::vector<std::string>& deps, const std::vector<std::string>& nccl,
                   const std::vector<std::string>& cusolvermp) { return jaxmg::load(deps, nccl, cusolvermp); },
        nb::arg("deps"), nb::arg("nccl"), nb::arg("cusolvermp"),
        "dlopen the dependencies, NCCL and cuSOLVERMp from the first candidate paths that load.");
  m.def("loaded", []() { return jaxmg::api().loaded; });
  m.def("load_error", []() { return jaxmg::api().error; });
  m.def("load_log", []() { return jaxmg::api().log; });
  m.def("library_paths", []() {
    nb::dict d;
    d["cusolvermp"] = jaxmg::api().cusolvermp_path;
    d["nccl"] = jaxmg::api().nccl_path;
    return d;
  });
}

// Versions (of the headers built against and of the loaded libraries) and capabilities.
void def_versions(nb::module_& m) {
  m.def("cuda_runtime_version", []() {
    int version = 0;
    cudaRuntimeGetVersion(&version);
    return version;
  }, "The CUDA runtime version this module was built against (e.g. 13000).");
  m.def("header_versions", []() {
    nb::dict d;
    d["cusolvermp"] = CUSOLVERMP_VERSION;
    d["nccl"] = NCCL_VERSION_CODE;
    d["cuda_runtime"] = CUDART_VERSION;
    return d;
  }, "Versions of the cuSOLVERMp, NCCL and CUDA headers this module was compiled with.");
  m.def("nccl_version", []() {
    int v = -1;
    if (jaxmg::api().loaded) jaxmg::api().ncclGetVersion(&v);
    return v;
  }, "The loaded NCCL's version code (-1 when not loaded).");
  m.def("cusolvermp_version", []() { return jaxmg::cache_info().cusolvermp_version; },
        "The loaded cuSOLVERMp's version (from its first handle; -1 before the first native call).");
  m.def("capabilities", []() {
    nb::dict d;
    const auto& a = jaxmg::api();
    d["potrf"] = a.loaded;
    d["potrs"] = a.loaded;
    d["getrf"] = a.loaded;
    d["getrs"] = a.loaded;
    d["geqrf"] = a.loaded;
    d["ormqr"] = a.loaded;
    d["orgqr"] = a.loaded;
    d["syevd"] = a.loaded;
    d["sygvd"] = a.loaded;
    d["gesvd"] = a.loaded && a.cusolverMpGesvd != nullptr;
    d["polar"] = a.loaded && a.cusolverMpPolar != nullptr;
    d["tiled_solve"] = a.loaded && a.blas;  // cuBLAS found: potrs on 1 x P grids solves by tiles
    d["gemm"] = a.loaded && a.blas;         // cuBLAS found: one-GPU products without autotuning
    return d;
  }, "Which cuSOLVERMp entry points the loaded library has (optional ones are probed).");
}

// The process index, timings, the grid cache and the communicator watchdog.
void def_state(nb::module_& m) {
  m.def("set_process_index", &jaxmg::set_process_index, "Set this process's index (device identity = index*1024+ordinal).");
  m.def("process_index", &jaxmg::process_index);
  m.def("last_timings", []() {
    nb::list out;
    for (const auto& t : jaxmg::last_timings()) {
      nb::dict d;
      d["device"] = t.device;
      d["kind"] = t.kind;
      d["valid"] = t.valid;
      d["layout_ms"] = t.layout_ms;
      d["solver_ms"] = t.solver_ms;
      d["factor_ms"] = t.factor_ms;
      d["calls"] = t.calls;
      out.append(d);
    }
    return out;
  }, "Per device and call kind (potrf, potrs, ...): GPU time (ms) of the layout step and inside cuSOLVERMp, summed over the native calls since reset_timings().");
  m.def("reset_timings", &jaxmg::reset_timings);
  m.def("cache_info", []() {
    auto i = jaxmg::cache_info();
    nb::dict d;
    d["communicators"] = i.communicators;
    d["descriptors"] = i.descriptors;
    d["workspace_bytes"] = i.workspace_bytes;
    return d;
  });
  m.def("clear_cache", &jaxmg::clear_cache);
  m.def("abort_communicators", &jaxmg::request_abort, nb::arg("reason"),
        "Abort every cached grid's NCCL communicator (ncclCommAbort) with this reason: calls blocked in "
        "them end, and every call on those grids fails from then on.");
  m.def("aborts", &jaxmg::aborts_so_far, "Every communicator abort so far, with its reason ('' when none).");
  m.def("native_timeout", &jaxmg::native_timeout_s, "JAXMG_NATIVE_TIMEOUT in seconds (0: no limit).");
}

}  // namespace

NB_MODULE(_native, m) {
  m.doc() = "jaxmg native library: XLA FFI handlers for cuSOLVERMp";
  def_handlers(m);
  def_loading(m);
  def_versions(m);
  def_state(m);
}
