// jaxmg._native: the native library's Python face. Handler capsules for jax.ffi.register_ffi_target,
// run-time loading of NCCL/cuSOLVERMp, versions, capabilities, timings and the grid cache.
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <utility>

#include "band.h"
#include "codes.h"
#include "dynload.h"
#include "handlers.h"
#include "watchdog.h"

namespace nb = nanobind;

namespace {

template <typename T>
nb::capsule handler_capsule(T* fn) {
  return nb::capsule(reinterpret_cast<void*>(fn), "xla._CUSTOM_CALL_TARGET");
}

// Every FFI handler of the library, by target name.
const std::pair<const char*, XLA_FFI_Handler*> kHandlers[] = {
    {"jaxmg_identity", jaxmg::jaxmg_identity},
    {"jaxmg_nccl_id", jaxmg::jaxmg_nccl_id},
    {"jaxmg_potrf", jaxmg::jaxmg_potrf},
    {"jaxmg_potrs", jaxmg::jaxmg_potrs},
    {"jaxmg_getrf", jaxmg::jaxmg_getrf},
    {"jaxmg_getrs", jaxmg::jaxmg_getrs},
    {"jaxmg_geqrf", jaxmg::jaxmg_geqrf},
    {"jaxmg_orgqr", jaxmg::jaxmg_orgqr},
    {"jaxmg_syevd", jaxmg::jaxmg_syevd},
    {"jaxmg_sygvd", jaxmg::jaxmg_sygvd},
    {"jaxmg_gemm", jaxmg::jaxmg_gemm},
    {"jaxmg_trmm", jaxmg::jaxmg_trmm},
    {"jaxmg_potri", jaxmg::jaxmg_potri},
    {"jaxmg_getri", jaxmg::jaxmg_getri},
    {"jaxmg_relayout", jaxmg::jaxmg_relayout},
    {"jaxmg_sb2st", jaxmg::jaxmg_sb2st},
    {"jaxmg_tridiagonal_bisection", jaxmg::jaxmg_tridiagonal_bisection},
    {"jaxmg_stedc", jaxmg::jaxmg_stedc},
};

// The handler capsules by target name.
void def_handlers(nb::module_& m) {
  m.def(
      "handlers",
      []() {
        nb::dict d;
        for (const auto& [name, fn] : kHandlers) d[name] = handler_capsule(fn);
        return d;
      },
      "FFI handler capsules by target name (register with platform='CUDA').");
}

// Loading NCCL and cuSOLVERMp, and what was loaded.
void def_loading(nb::module_& m) {
  m.def(
      "load",
      [](const std::vector<std::string>& deps, const std::vector<std::string>& nccl,
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
  m.def(
      "cuda_runtime_version",
      []() {
        int version = 0;
        cudaRuntimeGetVersion(&version);
        return version;
      },
      "The CUDA runtime version this module was built against (e.g. 13000).");
  m.def(
      "header_versions",
      []() {
        nb::dict d;
        d["cusolvermp"] = CUSOLVERMP_VERSION;
        d["nccl"] = NCCL_VERSION_CODE;
        d["cuda_runtime"] = CUDART_VERSION;
        return d;
      },
      "Versions of the cuSOLVERMp, NCCL and CUDA headers this module was compiled with.");
  m.def(
      "nccl_version",
      []() {
        int v = -1;
        if (jaxmg::api().loaded) jaxmg::api().ncclGetVersion(&v);
        return v;
      },
      "The loaded NCCL's version code (-1 when not loaded).");
  m.def(
      "cusolvermp_version", []() { return jaxmg::cusolvermp_version(); },
      "The loaded cuSOLVERMp's version code (major*1000 + minor*100 + patch, from its first handle; -1 "
      "before any).");
  m.def("probe_cusolvermp_version", &jaxmg::probe_cusolvermp_version, nb::arg("device"),
        "The loaded cuSOLVERMp's version code, read once from a handle made on CUDA device `device` where "
        "none was made yet (-1 where it cannot be read).");
  m.def(
      "capabilities",
      []() {
        nb::dict d;
        const auto& a = jaxmg::api();
        // the required entry points: present once the library is loaded
        for (const char* kind : {"potrf", "potrs", "getrf", "getrs", "geqrf", "orgqr", "syevd", "sygvd"})
          d[kind] = a.loaded;
        d["gesvd"] = a.loaded && a.cusolverMpGesvd != nullptr;
        d["polar"] = a.loaded && a.cusolverMpPolar != nullptr;
        d["tiled_solve"] = a.loaded && a.blas;  // cuBLAS found: potrs on 1 x P grids solves by tiles
        d["gemm"] = a.loaded && a.blas;         // cuBLAS found: one-GPU products without autotuning
        d["relayout"] = a.loaded;               // one-GPU in-place transposes (CUDA runtime only)
        d["band"] = a.loaded;  // two-stage eigenvalues' bulge chasing and bisection (CUDA runtime only)
        // the tridiagonal eigenvectors of the two-stage eigensolver (jaxmg_stedc, on one GPU)
        d["stedc"] = a.loaded && a.cusolverMpStedc != nullptr && a.cusolverMpStedc_bufferSize != nullptr;
        return d;
      },
      "Which cuSOLVERMp entry points the loaded library has (optional ones are probed).");
}

// The codes shared with the Python side (codes.h), by name.
void def_codes(nb::module_& m) {
  m.def(
      "codes",
      []() {
        nb::dict d;
#define JAXMG_EXPORT_CODE(name, value) d[#name] = jaxmg::codes::name;
        JAXMG_SHARED_CODES(JAXMG_EXPORT_CODE)
#undef JAXMG_EXPORT_CODE
        return d;
      },
      "The codes that the handlers and their Python callers share (csrc/codes.h), {name: value}.");
  m.def("sb2st_scratch_bytes", &jaxmg::sb2st_scratch_bytes, nb::arg("n"), nb::arg("b"), nb::arg("elem_size"),
        "Bytes of device scratch jaxmg_sb2st needs per matrix (order n, half-bandwidth b).");
}

// The process index, timings, the grid cache and the communicator watchdog.
void def_state(nb::module_& m) {
  m.def("set_process_index", &jaxmg::set_process_index,
        "Set this process's index (device identity = index * codes()['process_stride'] + ordinal).");
  m.def("process_index", &jaxmg::process_index);
  m.def(
      "last_timings",
      []() {
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
      },
      "Per device and call kind (potrf, potrs, ...): GPU time (ms) of the layout step and inside cuSOLVERMp, summed "
      "over the native calls since reset_timings().");
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
  def_codes(m);
  def_state(m);
}
