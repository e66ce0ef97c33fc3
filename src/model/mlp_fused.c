/* The MLP's fc GEMM + GELU as one fused kernel (rp_matmul_forward_gelu),
 * bitwise equal to the two calls it replaces. bf16 runs keep the two calls:
 * their matmul is the bf16 GEMM, which has no GELU epilogue.
 *
 * Profiled, the fused call is split into its GEMM and its GELU share by the
 * epilogue time the kernel measures on the calling thread, so the step
 * profile's GELU row stays the GELU's. */
#include "model_internal.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_prof.h"
#include "ringpipe/rp_util.h"

static void prof_split(rp_prof_id gemm, rp_prof_id epilogue, double t0, double epi_s) {
  double total = rp_now() - t0;
  rp_prof_add(gemm, total > epi_s ? total - epi_s : 0.0);
  rp_prof_add(epilogue, epi_s);
}

void rp_mm_forward_gelu(float *pre, float *post, const float *inp, const float *w,
                        const float *bias, int N, int IC, int OC, const rp_exec *x) {
  if (x->bf16) {
    RP_PROF(RP_PROF_FWD_MATMUL, rp_mm_forward(pre, inp, w, bias, N, IC, OC, x));
    RP_PROF(RP_PROF_FWD_GELU, rp_gelu_forward(post, pre, (long)N * OC, x->pool));
    return;
  }
  if (!rp_prof_enabled) {
    rp_matmul_forward_gelu(pre, post, inp, w, bias, N, IC, OC, x->pool, NULL);
    return;
  }
  double t0 = rp_now(), epi_s = 0.0;
  rp_matmul_forward_gelu(pre, post, inp, w, bias, N, IC, OC, x->pool, &epi_s);
  prof_split(RP_PROF_FWD_MATMUL, RP_PROF_FWD_GELU, t0, epi_s);
}
