// Hopper warpgroup MMA (wgmma.mma_async, sm_90a) through inline PTX: D[64 x N] (+)= A[64 x 16] * B[16 x N]^T
// with A and B in shared memory (128-byte swizzle, described by `desc_a` / `desc_b`; K-major, or M- / N-major
// where TA / TB: PTX's imm-trans-a / imm-trans-b) and D in registers, fp32 accumulate. One wrapper per N
// kjit's sm_90 GEMM uses; `accumulate` = 0 overwrites D.
// PTX has no register ranges and an asm statement no operand packs: the register lists and the operand
// lists are built by the macros below (each N's from the one before), and #undef'd at the end.
#pragma once

#include "numeric.cuh"

namespace kjit_wgmma {

template <typename T, int N, bool TA = false, bool TB = false>
struct Mma;

// "%0, %1, ..., %R-1": the R accumulator registers of a 64 x N wgmma (R = N / 2).
#define KJIT_WGMMA_REGS_64                                                                                         \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31"
#define KJIT_WGMMA_REGS_128                                                                                     \
  KJIT_WGMMA_REGS_64                                                                                            \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, " \
  "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define KJIT_WGMMA_REGS_192                                                                                     \
  KJIT_WGMMA_REGS_128                                                                                           \
  ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, " \
  "%85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define KJIT_WGMMA_REGS_256                                                                                    \
  KJIT_WGMMA_REGS_192                                                                                          \
  ", %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, " \
  "%114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
// The asm operands of those registers, d[0] to d[R - 1], read and written.
#define KJIT_WGMMA_D8(i)                                                                                      \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define KJIT_WGMMA_D_64 KJIT_WGMMA_D8(0), KJIT_WGMMA_D8(8), KJIT_WGMMA_D8(16), KJIT_WGMMA_D8(24)
#define KJIT_WGMMA_D_128 KJIT_WGMMA_D_64, KJIT_WGMMA_D8(32), KJIT_WGMMA_D8(40), KJIT_WGMMA_D8(48), KJIT_WGMMA_D8(56)
#define KJIT_WGMMA_D_192 KJIT_WGMMA_D_128, KJIT_WGMMA_D8(64), KJIT_WGMMA_D8(72), KJIT_WGMMA_D8(80), KJIT_WGMMA_D8(88)
#define KJIT_WGMMA_D_256 KJIT_WGMMA_D_192, KJIT_WGMMA_D8(96), KJIT_WGMMA_D8(104), KJIT_WGMMA_D8(112), KJIT_WGMMA_D8(120)
// Mma<T, N, TA, TB>: AB is the PTX type of A and B ("bf16", "f16"), R = N / 2 the accumulators; the operands
// after them are %R (desc_a), %R+1 (desc_b), %R+2 (accumulate), %R+3 and %R+4 (the transposes, immediates),
// spelled out as DESC_A, DESC_B, SCALE_D, TNSP_A and TNSP_B.
#define KJIT_WGMMA_MMA(T, AB, N, R, DESC_A, DESC_B, SCALE_D, TNSP_A, TNSP_B)                                        \
  template <bool TA, bool TB>                                                                                       \
  struct Mma<T, N, TA, TB> {                                                                                        \
    static __device__ __forceinline__ void run(float (&d)[R], unsigned long long desc_a, unsigned long long desc_b, \
                                               int accumulate) {                                                    \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE_D                                                      \
                   ", 0;\n"                                                                                         \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." AB "." AB " {" KJIT_WGMMA_REGS_##N             \
                   "}, " DESC_A ", " DESC_B ", p, 1, 1, " TNSP_A ", " TNSP_B ";\n}\n"                               \
                   : KJIT_WGMMA_D_##N                                                                               \
                   : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TA ? 1 : 0), "n"(TB ? 1 : 0));                  \
    }                                                                                                               \
  };
// The four N of kjit's sm_90 GEMM for one element type.
#define KJIT_WGMMA_MMAS(T, AB)                                       \
  KJIT_WGMMA_MMA(T, AB, 64, 32, "%32", "%33", "%34", "%35", "%36")   \
  KJIT_WGMMA_MMA(T, AB, 128, 64, "%64", "%65", "%66", "%67", "%68")  \
  KJIT_WGMMA_MMA(T, AB, 192, 96, "%96", "%97", "%98", "%99", "%100") \
  KJIT_WGMMA_MMA(T, AB, 256, 128, "%128", "%129", "%130", "%131", "%132")

#ifdef KJIT_DETAIL_BFLOAT16
KJIT_WGMMA_MMAS(__nv_bfloat16, "bf16")
#endif  // KJIT_DETAIL_BFLOAT16

#ifdef KJIT_DETAIL_HALF
KJIT_WGMMA_MMAS(__half, "f16")
#endif  // KJIT_DETAIL_HALF

#undef KJIT_WGMMA_MMAS
#undef KJIT_WGMMA_MMA
#undef KJIT_WGMMA_D_256
#undef KJIT_WGMMA_D_192
#undef KJIT_WGMMA_D_128
#undef KJIT_WGMMA_D_64
#undef KJIT_WGMMA_D8
#undef KJIT_WGMMA_REGS_256
#undef KJIT_WGMMA_REGS_192
#undef KJIT_WGMMA_REGS_128
#undef KJIT_WGMMA_REGS_64

__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
}
// Keeps the compiler from moving accumulator reads and writes across the asynchronous MMA.
template <int R>
__device__ __forceinline__ void fence_operands(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

}  // namespace kjit_wgmma
