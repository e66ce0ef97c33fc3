/* Pictures of timelines: an ASCII chart for terminals and an SVG in the style
 * of the pipeline papers' figures (one row per rank, a coloured box per
 * compute labelled with its micro-batch, later chunks in lighter shades). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "ringpipe/rp_schedule.h"

static int sim_bounds(const rp_sim *sim, double *t_first, double *t_last, double *min_dur) {
  int any = 0;
  *t_first = INFINITY;
  *t_last = -INFINITY;
  *min_dur = INFINITY;
  for (int r = 0; r < sim->p; r++)
    for (int i = 0; i < sim->n[r]; i++) {
      const rp_span *sp = &sim->spans[r][i];
      if (!rp_op_is_compute(sp->a.op)) continue;
      any = 1;
      if (sp->t0 < *t_first) *t_first = sp->t0;
      if (sp->t1 > *t_last) *t_last = sp->t1;
      if (sp->t1 > sp->t0 && sp->t1 - sp->t0 < *min_dur) *min_dur = sp->t1 - sp->t0;
    }
  return any;
}

/* "F3"; with two chunks the second is lower case ("f3", the ASCII for the
 * papers' lighter shade); with more, the chunk prefixes the op ("2F3"). */
static int label(const rp_schedule *s, rp_action a, char *buf, size_t n) {
  const char *op = rp_op_name(a.op);
  if (s->v == 2 && a.chunk == 1) return snprintf(buf, n, "%c%d", op[0] - 'A' + 'a', a.mb);
  if (s->v > 2) return snprintf(buf, n, "%d%s%d", a.chunk, op, a.mb);
  return snprintf(buf, n, "%s%d", op, a.mb);
}

/* A tick step of 1, 2 or 5 times a power of ten giving ticks >= min_gap apart. */
static double nice_step(double units_per_gap) {
  double p10 = pow(10, floor(log10(units_per_gap > 0 ? units_per_gap : 1)));
  for (int k = 0; k < 3; k++) {
    double step = p10 * (k == 0 ? 1 : k == 1 ? 2 : 5);
    if (step >= units_per_gap) return step;
  }
  return p10 * 10;
}

void rp_sim_print_ascii(FILE *f, const rp_schedule *s, const rp_sim *sim, int width) {
  double t0, t1, dmin;
  if (width <= 0) width = 160;
  if (!sim_bounds(sim, &t0, &t1, &dmin)) {
    fprintf(f, "(empty timeline)\n");
    return;
  }
  int lmax = 1;
  char buf[48];
  for (int r = 0; r < s->p; r++)
    for (int i = 0; i < s->n[r]; i++)
      if (rp_op_is_compute(s->acts[r][i].op)) lmax = RP_MAX(lmax, label(s, s->acts[r][i], buf, sizeof buf));
  double T = t1 - t0;
  /* Enough columns for the shortest box to hold its label and a space. */
  double scale = isfinite(dmin) ? ceil((lmax + 1) / dmin) : 1;
  if (T * scale > width) scale = width / T;
  /* Squeezed into `width`, 2F3 style labels lose their chunk prefix. */
  int roomy = s->v <= 2 || !isfinite(dmin) || dmin * scale >= lmax + 1;
  int cols = (int)ceil(T * scale - 1e-9);
  if (cols < 1) cols = 1;
  char *line = malloc((size_t)cols + 1);
  if (!line) return;

  /* Time axis: a tick mark every `step` units, its value above it. */
  double step = nice_step(8.0 / scale);
  memset(line, ' ', (size_t)cols);
  line[cols] = '\0';
  char *marks = malloc((size_t)cols + 1);
  if (!marks) {
    free(line);
    return;
  }
  memset(marks, ' ', (size_t)cols);
  marks[cols] = '\0';
  for (double t = 0; t <= T + 1e-9; t += step) {
    int c = (int)lround(t * scale);
    if (c >= cols) c = cols - 1;
    char num[32];
    int nl = snprintf(num, sizeof num, "%g", t);
    if (c + nl <= cols) memcpy(line + c, num, (size_t)nl);
    marks[c] = '|';
  }
  fprintf(f, "%-8s %s\n%-8s %s\n", "time", line, "", marks);

  for (int r = 0; r < sim->p; r++) {
    memset(line, '.', (size_t)cols);
    for (int i = 0; i < sim->n[r]; i++) {
      const rp_span *sp = &sim->spans[r][i];
      if (!rp_op_is_compute(sp->a.op)) continue;
      int c0 = (int)lround((sp->t0 - t0) * scale), c1 = (int)lround((sp->t1 - t0) * scale);
      if (c0 >= cols) c0 = cols - 1;
      if (c1 > cols) c1 = cols;
      if (c1 <= c0) c1 = c0 + 1;
      /* A box too narrow for its label and a space keeps the label's head and
       * still ends in a space, so that neighbouring boxes stay apart. */
      int ll = label(s, sp->a, buf, sizeof buf), k = c1 - c0;
      if (!roomy) ll = snprintf(buf, sizeof buf, "%s%d", rp_op_name(sp->a.op), sp->a.mb);
      if (ll >= k && k >= 2) ll = k - 1;
      for (int c = c0; c < c1; c++) line[c] = c - c0 < ll ? buf[c - c0] : ' ';
    }
    fprintf(f, "rank %-3d|%s|\n", r, line);
  }
  fprintf(f, "%-8s F forward, B backward, I input grad, W weight grad%s; '.' idle\n", "",
          s->v == 2  ? ", lower case = chunk 1"
          : !roomy ? "; chunks not shown at this width (widen it)"
          : s->v > 2 ? ", 1F3 = chunk 1's F of micro-batch 3"
                     : "");
  free(line);
  free(marks);
}

/* ---- SVG ---- */

static const unsigned op_rgb[4] = {0x4e79a7, 0x59a14f, 0xf28e2b, 0xb07aa1}; /* F B I W */

/* The op's colour, lightened towards white for later chunks. */
static unsigned shade(int op, int chunk, int v) {
  unsigned rgb = op_rgb[op], out = 0;
  double t = v > 1 ? 0.55 * chunk / (v - 1) : 0;
  for (int k = 0; k < 3; k++) {
    unsigned c = (rgb >> (8 * k)) & 0xff;
    c = (unsigned)lround(c + (255 - c) * t);
    out |= c << (8 * k);
  }
  return out;
}

static void xml_text(FILE *f, const char *t) {
  for (; t && *t; t++) {
    if (*t == '<') fputs("&lt;", f);
    else if (*t == '>') fputs("&gt;", f);
    else if (*t == '&') fputs("&amp;", f);
    else if (*t == '"') fputs("&quot;", f);
    else fputc(*t, f);
  }
}

enum { LEFT = 70, PLOT_W = 1000, ROW_H = 22, ROW_GAP = 4, TITLE_H = 24, AXIS_H = 34, LEGEND_H = 30 };

static double panel_height(const rp_svg_panel *pn) {
  return TITLE_H + pn->sim->p * (ROW_H + ROW_GAP) + AXIS_H;
}

static void svg_panel(FILE *f, const rp_svg_panel *pn, double y, double scale, double tmax) {
  const rp_schedule *s = pn->s;
  const rp_sim *sim = pn->sim;
  double t0, t1, dmin;
  if (!sim_bounds(sim, &t0, &t1, &dmin)) t0 = 0;
  fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"14\" font-weight=\"bold\">", 4, y + 16);
  xml_text(f, pn->title);
  fputs("</text>\n", f);
  double ry = y + TITLE_H;
  for (int r = 0; r < sim->p; r++, ry += ROW_H + ROW_GAP) {
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"12\" text-anchor=\"end\">rank %d</text>\n",
            LEFT - 8, ry + ROW_H * 0.7, r);
    fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"#f2f2f2\"/>\n", LEFT,
            ry, tmax * scale, ROW_H);
    for (int i = 0; i < sim->n[r]; i++) {
      const rp_span *sp = &sim->spans[r][i];
      if (!rp_op_is_compute(sp->a.op)) continue;
      double x = LEFT + (sp->t0 - t0) * scale, w = (sp->t1 - sp->t0) * scale;
      unsigned col = shade(sp->a.op, sp->a.chunk, s->v);
      double lum = 0.299 * (col >> 16) + 0.587 * ((col >> 8) & 0xff) + 0.114 * (col & 0xff);
      fprintf(f,
              "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"#%06x\" "
              "stroke=\"#ffffff\" stroke-width=\"0.8\"><title>rank %d chunk %d %s mb %d: "
              "%.4g..%.4g</title></rect>\n",
              x, ry, w, ROW_H, col, r, sp->a.chunk, rp_op_name(sp->a.op), sp->a.mb, sp->t0,
              sp->t1);
      if (w >= 9)
        fprintf(f,
                "<text x=\"%.2f\" y=\"%.1f\" font-size=\"%d\" text-anchor=\"middle\" "
                "fill=\"%s\">%d</text>\n",
                x + w / 2, ry + ROW_H * 0.7, w >= 16 ? 11 : 8, lum > 150 ? "#000" : "#fff",
                sp->a.mb);
    }
  }
  /* Axis under the rows. */
  double ay = ry + 2;
  fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", LEFT, ay,
          LEFT + tmax * scale, ay);
  double step = nice_step(60.0 / scale);
  for (double t = 0; t <= tmax + 1e-9; t += step) {
    double x = LEFT + t * scale;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", x, ay,
            x, ay + 5);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\">%g</text>\n",
            x, ay + 16, t);
  }
  fprintf(f,
          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">time "
          "(makespan %.4g, bubble %.1f%% of total, %.1f%% of ideal)</text>\n",
          LEFT + tmax * scale, ay + 28, sim->makespan, 100 * sim->bubble_total,
          100 * sim->bubble_ideal);
}

rp_status rp_sim_write_svg(const char *path, const rp_svg_panel *panels, int npanels) {
  double tmax = 0, height = LEGEND_H + 8;
  int vmax = 1;
  for (int k = 0; k < npanels; k++) {
    tmax = RP_MAX(tmax, panels[k].sim->makespan);
    height += panel_height(&panels[k]);
    vmax = RP_MAX(vmax, panels[k].s->v);
  }
  if (!(tmax > 0)) return rp_err(RP_EINVAL, "nothing to draw: the timelines are empty");
  double scale = PLOT_W / tmax;
  FILE *f = fopen(path, "w");
  if (!f) return rp_err(RP_EIO, "cannot write %s: check the directory exists", path);
  int width = LEFT + PLOT_W + 20;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\" "
          "viewBox=\"0 0 %d %.0f\" font-family=\"Helvetica, Arial, sans-serif\">\n"
          "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n",
          width, height, width, height);
  double y = 4;
  for (int k = 0; k < npanels; k++) {
    svg_panel(f, &panels[k], y, scale, tmax);
    y += panel_height(&panels[k]);
  }
  /* Legend. */
  const char *names[4] = {"F forward", "B backward", "I input grad", "W weight grad"};
  double x = LEFT;
  for (int op = 0; op < 4; op++) {
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"14\" fill=\"#%06x\"/>\n", x,
            y + 6, op_rgb[op]);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"12\">%s</text>\n", x + 18, y + 17,
            names[op]);
    x += 130;
  }
  if (vmax > 1)
    fprintf(f,
            "<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"14\" fill=\"#%06x\"/>"
            "<text x=\"%.0f\" y=\"%.0f\" font-size=\"12\">later chunks lighter; numbers are "
            "micro-batches</text>\n",
            x, y + 6, shade(RP_OP_F, 1, 2), x + 18, y + 17);
  else
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"12\">numbers are micro-batches</text>\n",
            x, y + 17);
  fputs("</svg>\n", f);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) return rp_err(RP_EIO, "writing %s failed", path);
  return RP_OK;
}
