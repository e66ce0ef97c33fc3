/* The picture of one transformer layer under the run's tensor (and sequence)
 * parallelism, drawn with its real shapes: one lane per tp rank, a box per
 * tensor-producing step labelled with the rows x columns this rank holds,
 * coloured by what it is (replicated, this rank's rows under --sp, this rank's
 * heads / features), and the collectives as bands across all lanes. Written as
 * OUT/tp_layer.svg by train at start-up (world rank 0, --tp > 1); the figure in
 * docs/tensor_parallel.md is one of these. */
#include <stdio.h>

#include "train_internal.h"

enum { KIND_FULL, KIND_ROWS, KIND_SPLIT, KIND_COMM };
static const char *const fill[] = {"#d9d9d9", "#9ecae1", "#fdae6b", "#74c476"};

typedef struct {
  const char *name;
  int kind;          /* KIND_* */
  long rows, cols;   /* this rank's tensor (0 for a collective) */
} step;

/* The forward of a layer as steps; returns their number. */
static int layer_steps(const rp_trainer *t, step *s) {
  long N = (long)t->o.batch * t->T_local, C = t->cfg.C, tp = t->grid.tp;
  int sp = t->o.sp, n = 0, res = sp ? KIND_ROWS : KIND_FULL;
  long Nr = sp ? N / tp : N;
  const char *gather = sp ? "all-gather" : NULL, *reduce = sp ? "reduce-scatter" : "all-reduce";
  for (int half = 0; half < 2; half++) {
    s[n++] = (step){half ? "ln_2" : "ln_1", res, Nr, C};
    if (gather) s[n++] = (step){gather, KIND_COMM, 0, 0};
    if (!half) {
      s[n++] = (step){"c_attn (q|k|v)", KIND_SPLIT, N, 3 * C / tp};
      s[n++] = (step){"attention", KIND_SPLIT, N, C / tp};
    } else {
      s[n++] = (step){"c_fc", KIND_SPLIT, N, 4 * C / tp};
      s[n++] = (step){"GELU", KIND_SPLIT, N, 4 * C / tp};
    }
    s[n++] = (step){"c_proj (partial)", KIND_SPLIT, N, C};
    s[n++] = (step){reduce, KIND_COMM, 0, 0};
    s[n++] = (step){half ? "+ b + res2" : "+ b + x", res, Nr, C};
  }
  return n;
}

static void box(FILE *f, double x, double y, double w, double h, int kind, const char *l1,
                const char *l2) {
  fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='%s' stroke='#444'/>\n", x,
          y, w, h, fill[kind]);
  fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle'>%s</text>\n", x + w / 2, y + h / 2 - 2,
          l1);
  if (l2)
    fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='9'>%s</text>\n",
            x + w / 2, y + h / 2 + 10, l2);
}

static void legend(FILE *f, double y) {
  static const char *const what[] = {"replicated on every tp rank", "this rank's N/tp rows (--sp)",
                                     "this rank's heads / features", "collective over tp"};
  for (int k = 0; k < 4; k++) {
    fprintf(f, "<rect x='%d' y='%.1f' width='14' height='10' fill='%s' stroke='#444'/>\n",
            20 + 230 * k, y, fill[k]);
    fprintf(f, "<text x='%d' y='%.1f'>%s</text>\n", 40 + 230 * k, y + 9, what[k]);
  }
}

rp_status rp_tp_write_figure(const rp_trainer *t, const char *path) {
  step s[32];
  int n = layer_steps(t, s), tp = t->grid.tp;
  double bw = 86, cw = 22, gap = 6, lane = 46, top = 40, x0 = 60;
  double width = x0 + 20, height = top + tp * lane + 50;
  for (int i = 0; i < n; i++) width += (s[i].kind == KIND_COMM ? cw : bw) + gap;
  FILE *f = fopen(path, "w");
  if (!f) return rp_err(RP_EIO, "cannot write %s; pass a writable --out", path);
  fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
             "font-family='sans-serif' font-size='10'>\n<rect width='100%%' height='100%%' "
             "fill='white'/>\n", width, height);
  fprintf(f, "<text x='20' y='20' font-size='13'>one layer's forward under --tp %d%s: N = %d x %d "
             "rows, C = %d, %d heads (tensors: this rank's rows x columns)</text>\n",
          tp, t->o.sp ? " --sp" : "", t->o.batch, t->T_local, t->cfg.C, t->cfg.NH);
  for (int r = 0; r < tp; r++) {
    double y = top + r * lane;
    fprintf(f, "<text x='20' y='%.1f'>rank %d</text>\n", y + lane / 2, r);
    double x = x0;
    for (int i = 0; i < n; i++) {
      if (s[i].kind == KIND_COMM) {
        if (r == 0) {
          fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='%s' "
                     "stroke='#444'/>\n", x, top, cw, tp * lane - gap, fill[KIND_COMM]);
          fprintf(f, "<text transform='translate(%.1f,%.1f) rotate(-90)' text-anchor='middle'>"
                     "%s</text>\n", x + cw / 2 + 3, top + (tp * lane - gap) / 2, s[i].name);
        }
        x += cw + gap;
        continue;
      }
      char dims[48];
      snprintf(dims, sizeof dims, "%ld x %ld", s[i].rows, s[i].cols);
      box(f, x, y, bw, lane - gap, s[i].kind, s[i].name, dims);
      x += bw + gap;
    }
  }
  legend(f, top + tp * lane + 14);
  fprintf(f, "</svg>\n");
  return fclose(f) == 0 ? RP_OK : rp_err(RP_EIO, "cannot write %s", path);
}
