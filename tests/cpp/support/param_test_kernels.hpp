// Kernels whose parameters cover what a parameter count and the parameter sizes must handle: 0 to 29
// parameters, structs passed by value, __grid_constant__ parameters of a CUtensorMap's size and alignment
// (128 bytes, 64-aligned), a parameter list over 8000 bytes (ptxas's EIATTR_KPARAM_INFO_V2 records), a
// template kernel and a kernel that ignores its parameters; with each one's parameter sizes. Shared by
// test_image_params (the count read from NVRTC's cubins and PTX) and gpu_test_param_sizes (the loaded
// kernels' sizes).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "kjit/template_arg.hpp"

namespace kjit::testing {

inline const char* param_test_source() {
  return R"(
struct Big { float v[32]; };                                          // 128 bytes
struct alignas(64) TensorMapLike { unsigned long long opaque[16]; };  // a CUtensorMap's size and alignment
struct Mixed { char c; double d; int i; };
struct Huge { char b[20000]; };                                       // past EIATTR_KPARAM_INFO (V1) records

__global__ void none() {}
__global__ void one(float* x) { x[0] = 1; }
__global__ void unused(float* x, int a, double b, char c) {}
__global__ void structs(Big b, Mixed m, float* out) { out[0] = b.v[3] + m.d; }
__global__ void grid_constant(const __grid_constant__ TensorMapLike t, float* out, int n) {
  out[n] = (float)t.opaque[2];
}
__global__ void tensor_maps(const __grid_constant__ TensorMapLike a, const __grid_constant__ TensorMapLike b, float* c,
                            int m, int n, int k, long long ldc) {
  c[m] = a.opaque[n] + b.opaque[k] + ldc;
}
__global__ void huge(Huge h, float* out, int i) { out[i] = h.b[i]; }
__global__ void many(float* a0, float* a1, float* a2, float* a3, float* a4, float* a5, float* a6, float* a7,
                     int b0, int b1, int b2, int b3, int b4, int b5, int b6, int b7, char c0, short c1, long long c2,
                     double c3, float* a8, float* a9, float* a10, float* a11, float* a12, float* a13, float* a14,
                     float* a15, int z) {
  a0[z] = b0 + c2;
}
template <typename T, int N>
__global__ void scaled(T* x, T c, int n) {
  if (n < N) x[n] += c;
}
)";
}

struct ParamTestKernel {
  std::string kernel;
  std::vector<std::pair<std::string, TemplateArg>> args;
  std::vector<std::size_t> sizes;  // one per parameter
};

inline const std::vector<ParamTestKernel>& param_test_kernels() {
  static const std::vector<ParamTestKernel> k = [] {
    std::vector<std::size_t> many(8, 8);
    many.insert(many.end(), 8, 4);
    many.insert(many.end(), {1, 2, 8, 8});
    many.insert(many.end(), 8, 8);
    many.push_back(4);
    return std::vector<ParamTestKernel>{
        {"none", {}, {}},
        {"one", {}, {8}},
        {"unused", {}, {8, 4, 8, 1}},
        {"structs", {}, {128, 24, 8}},
        {"grid_constant", {}, {128, 8, 4}},
        {"tensor_maps", {}, {128, 128, 8, 4, 4, 4, 8}},
        {"huge", {}, {20000, 8, 4}},
        {"many", {}, many},
        {"scaled", {{"T", TemplateArg::type(DType::Float32)}, {"N", TemplateArg::integer(4)}}, {8, 4, 4}},
    };
  }();
  return k;
}

}  // namespace kjit::testing
