/* The MLP's fc GEMM + GELU as one fused kernel (rp_matmul_forward_gelu, or
 * rp_matmul_bf16_forward_gelu when the weight has a bf16 copy), bitwise equal
 * to the two calls it replaces.
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
  const uint16_t *w16 = rp_mm_bf16_weight(x, w);
  double t0 = rp_prof_enabled ? rp_now() : 0.0, epi_s = 0.0;
  double *timed = rp_prof_enabled ? &epi_s : NULL;
  if (w16) rp_matmul_bf16_forward_gelu(pre, post, inp, w16, bias, N, IC, OC, x->pool, timed);
  else rp_matmul_forward_gelu(pre, post, inp, w, bias, N, IC, OC, x->pool, timed);
  if (timed) prof_split(RP_PROF_FWD_MATMUL, RP_PROF_FWD_GELU, t0, epi_s);
}
