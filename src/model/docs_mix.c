/* The seeded multimodal-like document length mix (rp_docs.h). */
#include <math.h>
#include <stdlib.h>

#include "ringpipe/rp_docs.h"
#include "ringpipe/rp_util.h"

rp_docs_mix rp_docs_mix_default(void) {
  return (rp_docs_mix){.short_min = 64, .short_max = 512, .long_min = 4096, .long_max = 8192,
                       .long_frac = 0.03};
}

static int draw_length(const rp_docs_mix *m, rp_rng *r) {
  if (rp_rng_uniform(r) < m->long_frac)
    return m->long_min + (int)rp_rng_below(r, (uint32_t)(m->long_max - m->long_min + 1));
  double lo = log((double)m->short_min), hi = log((double)m->short_max);
  return (int)lround(exp(lo + (hi - lo) * rp_rng_uniform(r)));
}

rp_status rp_docs_fill_mix(rp_docs *d, const rp_docs_mix *m, uint64_t seed) {
  if (m->short_min < 1 || m->short_max < m->short_min || m->long_min < 1 ||
      m->long_max < m->long_min || !(m->long_frac >= 0 && m->long_frac <= 1))
    return rp_err(RP_EINVAL, "length mix short %d..%d, long %d..%d at %g is invalid; need "
                  "1 <= min <= max and a fraction in [0, 1]", m->short_min, m->short_max,
                  m->long_min, m->long_max, m->long_frac);
  int32_t *lens = malloc(sizeof *lens * (size_t)d->T);
  if (!lens) return rp_err(RP_ENOMEM, "out of memory for a %d-token row", d->T);
  rp_rng r;
  rp_rng_seed(&r, seed);
  rp_status s = RP_OK;
  for (int b = 0; b < d->B && s == RP_OK; b++) {
    int n = 0;
    for (int left = d->T; left > 0; left -= lens[n++]) {
      int L = draw_length(m, &r);   /* once: RP_MIN evaluates its arguments twice */
      lens[n] = RP_MIN(left, L);
    }
    s = rp_docs_set_row(d, b, lens, n);
  }
  free(lens);
  return s;
}
