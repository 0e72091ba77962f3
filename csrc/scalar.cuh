// Scalar arithmetic of the four element types (float, double, cuFloatComplex, cuDoubleComplex)
// in device code, one overload set for every CUDA source: re, im, make (from real and imaginary
// parts), cj (conjugate), add, sub, mul, div, abs2 (|x|^2).
#pragma once

#include <cuComplex.h>

#include "dtype.h"

namespace jaxmg {
namespace scalar {

__device__ __forceinline__ float re(float x) { return x; }
__device__ __forceinline__ double re(double x) { return x; }
__device__ __forceinline__ float re(cuFloatComplex x) { return cuCrealf(x); }
__device__ __forceinline__ double re(cuDoubleComplex x) { return cuCreal(x); }
__device__ __forceinline__ float im(float) { return 0.f; }
__device__ __forceinline__ double im(double) { return 0.; }
__device__ __forceinline__ float im(cuFloatComplex x) { return cuCimagf(x); }
__device__ __forceinline__ double im(cuDoubleComplex x) { return cuCimag(x); }

template <typename T>
__device__ __forceinline__ T make(typename RealOf<T>::type r, typename RealOf<T>::type i);
template <>
__device__ __forceinline__ float make<float>(float r, float) {
  return r;
}
template <>
__device__ __forceinline__ double make<double>(double r, double) {
  return r;
}
template <>
__device__ __forceinline__ cuFloatComplex make<cuFloatComplex>(float r, float i) {
  return make_cuFloatComplex(r, i);
}
template <>
__device__ __forceinline__ cuDoubleComplex make<cuDoubleComplex>(double r, double i) {
  return make_cuDoubleComplex(r, i);
}

__device__ __forceinline__ float cj(float x) { return x; }
__device__ __forceinline__ double cj(double x) { return x; }
__device__ __forceinline__ cuFloatComplex cj(cuFloatComplex x) { return cuConjf(x); }
__device__ __forceinline__ cuDoubleComplex cj(cuDoubleComplex x) { return cuConj(x); }

__device__ __forceinline__ float add(float a, float b) { return a + b; }
__device__ __forceinline__ double add(double a, double b) { return a + b; }
__device__ __forceinline__ cuFloatComplex add(cuFloatComplex a, cuFloatComplex b) { return cuCaddf(a, b); }
__device__ __forceinline__ cuDoubleComplex add(cuDoubleComplex a, cuDoubleComplex b) { return cuCadd(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return a - b; }
__device__ __forceinline__ double sub(double a, double b) { return a - b; }
__device__ __forceinline__ cuFloatComplex sub(cuFloatComplex a, cuFloatComplex b) { return cuCsubf(a, b); }
__device__ __forceinline__ cuDoubleComplex sub(cuDoubleComplex a, cuDoubleComplex b) { return cuCsub(a, b); }
__device__ __forceinline__ float mul(float a, float b) { return a * b; }
__device__ __forceinline__ double mul(double a, double b) { return a * b; }
__device__ __forceinline__ cuFloatComplex mul(cuFloatComplex a, cuFloatComplex b) { return cuCmulf(a, b); }
__device__ __forceinline__ cuDoubleComplex mul(cuDoubleComplex a, cuDoubleComplex b) { return cuCmul(a, b); }
__device__ __forceinline__ cuFloatComplex div(cuFloatComplex a, cuFloatComplex b) { return cuCdivf(a, b); }
__device__ __forceinline__ cuDoubleComplex div(cuDoubleComplex a, cuDoubleComplex b) { return cuCdiv(a, b); }
__device__ __forceinline__ float div(float a, float b) { return a / b; }
__device__ __forceinline__ double div(double a, double b) { return a / b; }

template <typename T>
__device__ __forceinline__ typename RealOf<T>::type abs2(T x) {
  return re(x) * re(x) + im(x) * im(x);
}

}  // namespace scalar
}  // namespace jaxmg
