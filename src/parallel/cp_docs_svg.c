/* The picture of packed-row placements (rp_cp_docs_svg in rp_cp.h): which rank
 * owns which tokens, and which block pairs of the attention matrix hold a
 * visible (query, key) pair, per placement side by side. */
#include <stdio.h>
#include <stdlib.h>

#include "ringpipe/rp_cp.h"

static const char *rank_colour[8] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                     "#76b7b2", "#edc948", "#b07aa1", "#9c755f"};

/* Owner rank of every position of row 0. */
static void owners_of(const rp_docs *d, int *own) {
  const int Tl = d->T / d->cp;
  for (int r = 0; r < d->cp; r++) {
    const int32_t *g = rp_cp_docs_rows(d, 0, r);
    for (int t = 0; t < Tl; t++) own[g[t]] = r;
  }
}

/* One panel at x0: the strip, then the block matrix below it. */
static void panel(FILE *f, const rp_docs *d, const char *name, int block, double x0, double size,
                  const int *own) {
  const int T = d->T, nb = (T + block - 1) / block;
  const double px = size / T, cell = size / nb, y0 = 60;
  double work[8] = {0}, total = 0;
  for (int r = 0; r < d->cp && r < 8; r++) total += work[r] = rp_cp_docs_work(d, r);
  double mx = 0;
  for (int r = 0; r < d->cp && r < 8; r++) mx = work[r] > mx ? work[r] : mx;
  fprintf(f, "<text x='%.1f' y='20' font-size='14' font-weight='bold'>%s</text>\n", x0, name);
  fprintf(f, "<text x='%.1f' y='38' font-size='11'>work max/mean %.3f", x0,
          total > 0 ? mx / (total / d->cp) : 0.0);
  for (int r = 0; r < d->cp && r < 8; r++)
    fprintf(f, "%s r%d %.0f%%", r ? "," : ":", r, total > 0 ? 100.0 * work[r] / total : 0.0);
  fprintf(f, "</text>\n");
  for (int t = 0, u; t < T; t = u) {   /* the token strip, one rect per run of an owner */
    for (u = t + 1; u < T && own[u] == own[t]; u++) {
    }
    fprintf(f, "<rect x='%.2f' y='%.1f' width='%.2f' height='14' fill='%s'/>\n", x0 + t * px, y0,
            (u - t) * px + 0.05, rank_colour[own[t] % 8]);
  }
  const int32_t *cu = rp_docs_row(d, 0);
  for (int i = 1; i < d->ndocs[0]; i++)
    fprintf(f, "<line x1='%.2f' y1='%.1f' x2='%.2f' y2='%.1f' stroke='black' stroke-width='1.5'/>\n",
            x0 + cu[i] * px, y0 - 4, x0 + cu[i] * px, y0 + 18);
  const double my = y0 + 30;
  fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='#999'/>\n",
          x0, my, size, size);
  for (int qb = 0; qb < nb; qb++)
    for (int kb = 0; kb <= qb; kb++) {
      /* visible when some query of the block sees a key of the key block; the
       * cell takes the colour of the rank owning most of the block's queries */
      int vis = 0, count[8] = {0};
      for (int q = qb * block; q < RP_MIN(T, (qb + 1) * block); q++) {
        int s = rp_docs_start(d, 0, q);
        if (s < (kb + 1) * block && q >= kb * block) vis = 1;
        count[own[q] % 8]++;
      }
      if (!vis) continue;
      int best = 0;
      for (int r = 1; r < 8; r++) best = count[r] > count[best] ? r : best;
      fprintf(f, "<rect x='%.2f' y='%.2f' width='%.2f' height='%.2f' fill='%s' "
              "stroke='white' stroke-width='0.3'/>\n", x0 + kb * cell, my + qb * cell, cell,
              cell, rank_colour[best]);
    }
  fprintf(f, "<text x='%.1f' y='%.1f' font-size='10'>keys &#8594; (queries &#8595;), %d-token "
          "blocks</text>\n", x0, my + size + 14, block);
}

rp_status rp_cp_docs_svg(const char *path, const rp_docs *const *docs, const char *const *names,
                         int n, int block) {
  if (n < 1 || block < 1) return rp_err(RP_EINVAL, "an SVG needs panels and a block >= 1");
  for (int i = 0; i < n; i++)
    if (!docs[i]->gpos || docs[i]->cp < 1)
      return rp_err(RP_EINVAL, "panel '%s' is not placed over cp ranks", names[i]);
  FILE *f = fopen(path, "w");
  if (!f) return rp_err(RP_EIO, "cannot write %s", path);
  const double size = 300, gap = 40;
  fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
          "font-family='sans-serif'>\n<rect width='100%%' height='100%%' fill='white'/>\n",
          n * (size + gap) + gap, size + 130);
  rp_status s = RP_OK;
  for (int i = 0; i < n && s == RP_OK; i++) {
    int *own = malloc(sizeof *own * (size_t)docs[i]->T);
    if (!own) {
      s = rp_err(RP_ENOMEM, "out of memory drawing %s", path);
      break;
    }
    owners_of(docs[i], own);
    panel(f, docs[i], names[i], block, gap / 2 + i * (size + gap), size, own);
    free(own);
  }
  fprintf(f, "</svg>\n");
  if (fclose(f) != 0 && s == RP_OK) s = rp_err(RP_EIO, "writing %s failed", path);
  return s;
}
