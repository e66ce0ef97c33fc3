/* Pieces the fused kernels (matmul_fused.c) share with the plain ones: the
 * per-slice sgemm call of matmul.c and the per-span GELU loop of gelu.c. A
 * fused kernel calls the very functions the unfused composition calls, on the
 * same slices, so the two agree bitwise. */
#ifndef RP_FUSED_INTERNAL_H
#define RP_FUSED_INTERNAL_H

#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_pool.h"

/* out[lo:hi,:] = inp[lo:hi,:] @ weight^T (+ bias) (+ resid), as rp_matmul_forward */
void rp_matmul_rows_forward(float *out, const float *inp, const float *weight, const float *bias,
                            const float *resid, long lo, long hi, int IC, int OC);
/* 1 when rp_matmul_forward runs the row kernel above on row slices (one
 * thread: all rows; split mode: a slice per pool thread), so that an epilogue
 * can run on each thread's own rows inside the same task. */
int rp_matmul_rows_fusable(rp_pool *pool, int N);

/* The default (auto) GEMM mode from OpenBLAS's kernel level (rp_blas_core_isa),
 * the best own kernel the ceiling allows (rp_sgemm_kernel_best, -1 none),
 * whether the ceiling allows OpenBLAS's level and whether the CPU is AMD's
 * (rp_isa_cpu_is_amd): RP_GEMM_OWN or
 * RP_GEMM_POOL_SPLIT, and *every_weight = 1 where OWN takes every weight, 0
 * where it takes those up to 4 MiB and the backward of widening ones (the
 * rest split). Pure, so that every case can be tested on any machine. */
rp_gemm_mode rp_gemm_auto_rule(rp_isa blas_isa, int own_kernel, int blas_within_ceiling,
                               int cpu_amd, int *every_weight);

/* 1 when rp_matmul_* run ringpipe's own GEMM (rp_sgemm.h) for N rows of an
 * IC -> OC matmul */
int rp_matmul_own_applies(rp_pool *pool, int N, int IC, int OC, int backward);

/* dbias[lo:hi] += sum over the N rows of dout[:, lo:hi], rows in order */
void rp_matmul_dbias_cols(float *dbias, const float *dout, long lo, long hi, int N, int OC);

/* y[0:n) = gelu(x[0:n)) */
void rp_gelu_forward_span(float *y, const float *x, long n);

/* out[0:n) = a[0:n) + b[0:n), as rp_residual_forward (out may be a or b) */
void rp_residual_forward_span(float *out, const float *a, const float *b, long n);

#endif
