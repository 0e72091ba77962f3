// The element types of the native library: one numbering for the handlers (grid.h maps an FFI
// buffer's type to it), the CUDA kernels (layout.h), the tiled solve (trsolve.h) and the one-GPU
// products (gemm.cc). Host and device code include it; it needs the CUDA headers only.
#pragma once

#include <cuComplex.h>
#include <library_types.h>

namespace jaxmg {

enum class DType : int { F32 = 0, F64 = 1, C64 = 2, C128 = 3 };

constexpr bool is_complex(DType t) { return t == DType::C64 || t == DType::C128; }
// Bytes of one real part (the element type of log dets and eigenvalues), and of one element.
constexpr int real_bytes(DType t) { return t == DType::F32 || t == DType::C64 ? 4 : 8; }
constexpr int elem_bytes(DType t) { return real_bytes(t) * (is_complex(t) ? 2 : 1); }

// The CUDA data type of an element type (cuSOLVERMp's descriptors and calls).
constexpr cudaDataType cuda_type(DType t) {
  switch (t) {
    case DType::F32:
      return CUDA_R_32F;
    case DType::F64:
      return CUDA_R_64F;
    case DType::C64:
      return CUDA_C_32F;
    case DType::C128:
      break;
  }
  return CUDA_C_64F;
}

// fn(T{}) for the C++ element type T of `t`: float, double, cuComplex or cuDoubleComplex.
template <typename Fn>
decltype(auto) with_elem_type(DType t, Fn&& fn) {
  switch (t) {
    case DType::F32:
      return fn(float{});
    case DType::F64:
      return fn(double{});
    case DType::C64:
      return fn(cuComplex{});
    case DType::C128:
      break;
  }
  return fn(cuDoubleComplex{});
}

// The type of T's real parts.
template <typename T>
struct RealOf {
  using type = T;
};
template <>
struct RealOf<cuComplex> {
  using type = float;
};
template <>
struct RealOf<cuDoubleComplex> {
  using type = double;
};

}  // namespace jaxmg
