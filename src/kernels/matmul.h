// Matrix products through oneDNN (fp32 on AVX-512, bf16 where the CPU has avx512_bf16 or AMX).
// Row-major throughout.
//
//   C(M,N) = op(A)(M,K) @ op(B)(K,N) [+ bias(N)] [+ C if accumulate]
//
// op(A) = A when A is stored (M,K); with trans_a, A is stored (K,M). Likewise B is stored (K,N),
// or (N,K) with trans_b. Primitives are created once per shape and reused, with their memory
// objects: a call allocates nothing once its shape has been seen.
#pragma once
#include <cstdint>

#include "kernels/bf16.h"

namespace kiln {

struct MatmulShape {
  int64_t M, N, K;
  bool trans_a = false;
  bool trans_b = false;
  bool accumulate = false;
  bool bias = false;
};

void matmul(const MatmulShape& s, const float* a, const float* b, float* c,
            const float* bias = nullptr);

// The same product with bf16 operands, accumulated and written in fp32 (bias in fp32). On a CPU
// without avx512_bf16 or AMX the operands are widened to fp32 and multiplied there: the same
// arithmetic, fp32's speed, and fp32's determinism (same bits for the same thread count; the
// native bf16 kernels also give the same bits for any thread count).
void matmul_bf16(const MatmulShape& s, const bf16* a, const bf16* b, float* c,
                 const float* bias = nullptr);
// Whether bf16 products run on the CPU's own bf16 instructions (see above).
bool matmul_bf16_native();

// A batch of fp32 products over two batch dimensions, every operand addressed by explicit
// strides in elements (batch 0, batch 1, row, column), so that heads can be read in place from
// interleaved tensors:  C[i][j](M,N) = A[i][j](M,K) @ B[i][j](K,N) [+ C if accumulate].
// A transposed operand is just the strides swapped. Cached per shape and strides, as above.
struct StridedMatmul {
  int64_t batch0, batch1, M, N, K;
  int64_t a[4], b[4], c[4];
  bool accumulate = false;
};
void matmul_strided(const StridedMatmul& s, const float* a, const float* b, float* c);

// Sets the thread count used by every kernel (OpenMP and oneDNN share the pool).
void set_num_threads(int n);
int num_threads();

// Best GEMM rate this machine reaches, in GFLOP/s, over a few large shapes, each run for about
// `seconds` in all, split into `rounds` passes over the shapes (the ceiling MFU is measured
// against, see train/peak.h). With bf16, the operands are bf16 and the accumulation fp32, as in
// training with train.dtype = "bf16".
double measure_peak_gflops(double seconds, bool bf16 = false, int rounds = 1);

}  // namespace kiln
