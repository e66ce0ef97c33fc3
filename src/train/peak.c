/* The MFU denominator: sgemm FLOP/s on the model's own GEMM shapes, measured in
 * the same process with the same threads and GEMM mode as training. */
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_train.h"

double rp_measure_gemm_peak(const rp_gpt_config *cfg, int B, int T, rp_pool *pool) {
  long N = (long)B * T, C = cfg->C;
  /* (in, out) of every matmul of a layer and of the LM head */
  const long shapes[5][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, cfg->Vp}};
  long maxio = 4 * C > cfg->Vp ? 4 * C : cfg->Vp;
  float *inp = rp_alloc(N * maxio * sizeof(float), RP_MEM_WORKSPACE);
  float *out = rp_alloc(N * maxio * sizeof(float), RP_MEM_WORKSPACE);
  float *w = rp_alloc(maxio * maxio * sizeof(float), RP_MEM_WORKSPACE);
  float *dw = rp_alloc(maxio * maxio * sizeof(float), RP_MEM_WORKSPACE);
  float *dinp = rp_alloc(N * maxio * sizeof(float), RP_MEM_WORKSPACE);
  if (!inp || !out || !w || !dw || !dinp) return 0;
  for (long i = 0; i < N * maxio; i++) inp[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
  for (long i = 0; i < maxio * maxio; i++) w[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
  double best = 0;
  for (int rep = 0; rep < 4; rep++) {  /* first rep warms caches and BLAS threads */
    double flops = 0, t0 = rp_now();
    for (int s = 0; s < 5; s++) {
      int IC = (int)shapes[s][0], OC = (int)shapes[s][1];
      rp_matmul_forward(out, inp, w, NULL, (int)N, IC, OC, pool);
      rp_matmul_backward(dinp, dw, NULL, out, inp, w, (int)N, IC, OC, pool);
      flops += 6.0 * N * IC * OC;
    }
    double rate = flops / (rp_now() - t0);
    if (rep > 0 && rate > best) best = rate;
  }
  rp_free(inp);
  rp_free(out);
  rp_free(w);
  rp_free(dw);
  rp_free(dinp);
  return best;
}

char *openblas_get_corename(void);

/* OpenBLAS 0.3.21 does not know some newer CPUs and falls back to its generic
 * "Prescott" (SSE3) kernels, about 4x slower than its AVX-512 ones; users can
 * override that with OPENBLAS_CORETYPE, which ringpipe never sets itself. */
const char *rp_blas_advice(void) {
  const char *core = openblas_get_corename();
  if (!core) return NULL;
  int generic = strcmp(core, "Prescott") == 0 || strcmp(core, "Core2") == 0 ||
                strcmp(core, "Nehalem") == 0 || strcmp(core, "Atom") == 0;
  if (!generic) return NULL;
  /* the advice follows the rp_isa.h ceiling: under RINGPIPE_ISA=avx2 an AVX-512
   * coretype would break the AVX2-only behaviour the user asked for */
  if (rp_isa_allows(RP_ISA_AVX512))
    return "OpenBLAS picked its generic kernels on an AVX-512 CPU; OPENBLAS_CORETYPE=SKYLAKEX "
           "typically makes GEMMs ~4x faster";
  if (rp_isa_allows(RP_ISA_AVX2))
    return "OpenBLAS picked its generic kernels on an AVX2 CPU; OPENBLAS_CORETYPE=HASWELL "
           "typically makes GEMMs several times faster";
  return NULL;
}

const char *rp_blas_core(void) {
  const char *core = openblas_get_corename();
  return core ? core : "unknown";
}
