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
  rp_prof_gemm_note(N, IC, OC, 0, 0, 0);
  double t0 = rp_prof_enabled ? rp_now() : 0.0, epi_s = 0.0;
  double *timed = rp_prof_enabled ? &epi_s : NULL;
  if (w16) rp_matmul_bf16_forward_gelu(pre, post, inp, w16, bias, N, IC, OC, x->pool, timed);
  else rp_matmul_forward_gelu(pre, post, inp, w, bias, N, IC, OC, x->pool, timed);
  if (timed) prof_split(RP_PROF_FWD_MATMUL, RP_PROF_FWD_GELU, t0, epi_s);
}

void rp_mm_backward_gelu(float *dpre, float *dpost, float *dbias_pre, float *dw, float *db,
                         const float *dout, const float *post, const float *pre, const float *w,
                         int N, int IC, int OC, const rp_exec *x) {
  if (rp_mm_bf16_weight(x, w)) { /* the bf16 GEMM has no epilogue here: the two calls */
    RP_PROF(RP_PROF_BWD_MATMUL, rp_mm_backward_set(dpost, dw, db, dout, post, w, N, IC, OC, x));
    RP_PROF(RP_PROF_BWD_GELU,
            rp_gelu_backward_set_dbias(dpre, dbias_pre, pre, dpost, N, IC, x->pool));
    return;
  }
  rp_prof_gemm_note(N, IC, OC, 1, dpost != NULL, dw != NULL);
  double t0 = rp_prof_enabled ? rp_now() : 0.0, epi_s = 0.0;
  rp_matmul_backward_gelu(dpre, dpost, dbias_pre, dw, db, dout, post, pre, w, N, IC, OC, x->pool,
                          rp_prof_enabled ? &epi_s : NULL);
  if (rp_prof_enabled) prof_split(RP_PROF_BWD_MATMUL, RP_PROF_BWD_GELU, t0, epi_s);
}
