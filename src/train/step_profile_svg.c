/* The step profile as a figure (rp_step_profile.h): where a step's time goes
 * and how far each part is from the peak it is held to. One bar per part on a
 * common scale, the step's wall time = the full width; the dark fill is the
 * time the part's counted work would take at its peak (FLOPs at the FMA probe,
 * bytes at the stream rate), so the light rest of a bar is what the part loses
 * to the machine's limit, and a part with no counted work (copies, data, comm
 * waits, idle) is all grey. The last bar is the whole step against the sum of
 * its parts' times at peak. Below them, where the profiler noted them, the
 * step's GEMM products on a scale of their own. Written by train and bench
 * train --profile as OUT/step_profile.svg; the figures in
 * docs/performance.md are such files. */
#include <stdio.h>

#include "io/io_fs.h"
#include "ringpipe/rp_step_profile.h"
#include "ringpipe/rp_util.h"

#define FIG_W 1010.0
#define LABEL_X 16.0
#define BAR_X 250.0
#define BAR_W 420.0
#define TEXT_X (BAR_X + BAR_W + 12.0)
#define ROW_H 24.0
#define TOP 64.0

typedef struct {
  const char *dark, *light;
} palette;
static const palette COMPUTE = {"#2171b5", "#c6dbef"}, MEMORY = {"#d94801", "#fdd0a2"},
                     OTHER = {"#969696", "#d9d9d9"};

/* Seconds the part's work takes at its peak; 0 when it has none counted. */
static double at_peak(const rp_step_work *w, const rp_step_peaks *pk, int p, const char **of) {
  *of = NULL;
  if (w->flops[p] > 0 && pk->fma_flops > 0) {
    *of = "FMA peak";
    return w->flops[p] / pk->fma_flops;
  }
  const double stream = rp_step_stream_of(pk, (rp_step_part)p);
  if (w->bytes[p] > 0 && stream > 0) {
    *of = "stream";
    return w->bytes[p] / stream;
  }
  return 0.0;
}

/* Text with XML's three special characters escaped. */
static void put_text(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '&') fputs("&amp;", f);
    else if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else fputc(*s, f);
  }
}

/* One bar: the part's time as a share of the step, dark up to its time at
 * peak (never past the bar: a part faster than the probe says shows full). */
static void bar(FILE *f, double y, const char *name, double secs, double ideal, double wall,
                const palette *c, const char *note) {
  const double w = wall > 0 ? BAR_W * secs / wall : 0.0;
  double d = wall > 0 ? BAR_W * ideal / wall : 0.0;
  if (d > w) d = w;
  fprintf(f, "<text x='%.0f' y='%.1f'>", LABEL_X, y + 15);
  put_text(f, name);
  fprintf(f, "</text>\n<rect x='%.0f' y='%.1f' width='%.0f' height='%.1f' fill='#f7f7f7' "
             "stroke='#bdbdbd'/>\n", BAR_X, y + 3, BAR_W, ROW_H - 6);
  fprintf(f, "<rect class='time' x='%.0f' y='%.1f' width='%.2f' height='%.1f' fill='%s'/>\n",
          BAR_X, y + 3, w, ROW_H - 6, c->light);
  fprintf(f, "<rect class='peak' x='%.0f' y='%.1f' width='%.2f' height='%.1f' fill='%s'/>\n",
          BAR_X, y + 3, d, ROW_H - 6, c->dark);
  fprintf(f, "<text x='%.0f' y='%.1f'>%s</text>\n", TEXT_X, y + 15, note);
}

static void legend(FILE *f, double y) {
  const struct {
    const palette *c;
    const char *what;
  } k[] = {{&COMPUTE, "FLOPs: dark = their time at the FMA peak"},
           {&MEMORY, "bytes: dark = their time at the stream rate"},
           {&OTHER, "no work counted"}};
  for (int i = 0; i < 3; i++) {
    const double x = LABEL_X + 300.0 * i;
    fprintf(f, "<rect x='%.0f' y='%.1f' width='12' height='10' fill='%s'/>", x, y, k[i].c->dark);
    fprintf(f, "<rect x='%.0f' y='%.1f' width='12' height='10' fill='%s'/>", x + 12, y,
            k[i].c->light);
    fprintf(f, "<text x='%.0f' y='%.1f'>%s</text>\n", x + 30, y + 9, k[i].what);
  }
  fprintf(f, "<text x='%.0f' y='%.1f' fill='#525252'>bar length: the part's mean time, the "
             "step's wall time = the full width; the light rest of a bar is what the part "
             "loses to the machine's limit</text>\n", LABEL_X, y + 28);
}

/* The GEMM products below the parts (rp_prof_gemm_rows), on their own scale:
 * the slowest product's mean time is the full width. Dark: the product's time
 * at the FMA peak; a black mark: its time at its own rate alone, where that
 * was measured. */
#define PRODUCTS_GAP 60.0
static void products(FILE *f, double y, const rp_prof_gemm_row *r, int n,
                     const rp_step_work *w, const rp_step_peaks *pk) {
  double longest = 0;
  for (int i = 0; i < n; i++) longest = RP_MAX(longest, r[i].seconds);
  fprintf(f, "<text x='%.0f' y='%.1f' font-size='13'>GEMM products (bar: mean time a step, "
             "the slowest = the full width; dark: at the FMA peak; black mark: at the "
             "product's rate alone)</text>\n", LABEL_X, y + 15);
  y += ROW_H;
  for (int i = 0; i < n; i++, y += ROW_H) {
    char name[96], note[96];
    const char *called = rp_step_gemm_product_name(w, r[i].in, r[i].out);
    snprintf(name, sizeof name, "%s%s%ld->%ld %s", called, *called ? " " : "", r[i].in, r[i].out,
             rp_prof_gemm_pass_name(r[i].pass));
    const double ideal = pk->fma_flops > 0 ? r[i].flops / pk->fma_flops : 0.0;
    const double alone = rp_step_gemm_alone_rate(pk, &r[i]);
    int len = snprintf(note, sizeof note, "%.2f ms", r[i].seconds * 1e3);
    if (ideal > 0 && r[i].seconds > 0)
      len += snprintf(note + len, sizeof note - (size_t)len, ": %.3f of the FMA peak",
                      ideal / r[i].seconds);
    if (ideal > 0 && alone > 0 && len > 0 && len < (int)sizeof note)
      snprintf(note + len, sizeof note - (size_t)len, ", %.3f alone", alone / pk->fma_flops);
    bar(f, y, name, r[i].seconds, ideal, longest, &COMPUTE, note);
    if (alone > 0 && longest > 0) {
      const double x = BAR_X + RP_MIN(BAR_W, BAR_W * r[i].flops / alone / longest);
      fprintf(f, "<rect class='alone' x='%.2f' y='%.1f' width='2' height='%.1f' "
                 "fill='black'/>\n", x - 1.0, y + 1, ROW_H - 2);
    }
  }
}

static rp_status write_figure(FILE *f, const char *title, const rp_step_times *st,
                              const rp_step_work *w, const rp_step_peaks *pk) {
  int rows = 0;
  for (int p = 0; p < RP_PART_COUNT; p++) rows += rp_step_part_shown((rp_step_part)p, st, w);
  rp_prof_gemm_row prod[RP_STEP_GEMM_ROWS];
  const int nprod = rp_prof_gemm_rows(prod, RP_STEP_GEMM_ROWS);
  const double height =
      TOP + (rows + 1) * ROW_H + 70 + (nprod > 0 ? PRODUCTS_GAP + (nprod + 1) * ROW_H : 0.0);
  fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
             "font-family='sans-serif' font-size='11'>\n<rect width='100%%' height='100%%' "
             "fill='white'/>\n<text x='%.0f' y='22' font-size='14'>", FIG_W, height, LABEL_X);
  put_text(f, title);
  fprintf(f, "</text>\n<text x='%.0f' y='42' fill='#525252'>mean step %.2f ms over %ld "
             "profiled steps; FMA peak %.1f GFLOP/s (%s probe x threads), stream %.1f GB/s",
          LABEL_X, st->wall * 1e3, st->steps, pk->fma_flops / 1e9,
          pk->fma_level ? pk->fma_level : "?", pk->stream_bytes / 1e9);
  if (pk->stream_opt_bytes > 0)
    fprintf(f, " (the optimizer's, over its footprint, %.1f GB/s)", pk->stream_opt_bytes / 1e9);
  fprintf(f, "</text>\n");
  double y = TOP, ideal_sum = 0, flops_sum = 0;
  for (int p = 0; p < RP_PART_COUNT; p++) {
    if (!rp_step_part_shown((rp_step_part)p, st, w)) continue;
    const char *of;
    const double ideal = at_peak(w, pk, p, &of);
    ideal_sum += ideal;
    flops_sum += w->flops[p];
    char note[96];
    int len = snprintf(note, sizeof note, "%.2f ms, %.1f %%", st->part[p] * 1e3,
                       st->wall > 0 ? 100.0 * st->part[p] / st->wall : 0.0);
    if (of && st->part[p] > 0)
      snprintf(note + len, sizeof note - (size_t)len, ": %.3f of the %s", ideal / st->part[p],
               of);
    bar(f, y, rp_step_part_name((rp_step_part)p, w), st->part[p], ideal, st->wall,
        !of ? &OTHER : w->flops[p] > 0 ? &COMPUTE : &MEMORY, note);
    y += ROW_H;
  }
  char note[128];
  snprintf(note, sizeof note, "%.2f ms, its parts at peak %.2f ms: %.3f of the FMA peak",
           st->wall * 1e3, ideal_sum * 1e3,
           st->wall > 0 && pk->fma_flops > 0 ? flops_sum / st->wall / pk->fma_flops : 0.0);
  bar(f, y + 6, "step (wall)", st->wall, ideal_sum, st->wall, &COMPUTE, note);
  legend(f, y + ROW_H + 22);
  if (nprod > 0) products(f, y + ROW_H + 22 + PRODUCTS_GAP, prod, nprod, w, pk);
  fprintf(f, "</svg>\n");
  return ferror(f) ? RP_EIO : RP_OK;
}

rp_status rp_step_profile_write_svg(const char *path, const char *title, const rp_step_times *st,
                                    const rp_step_work *w, const rp_step_peaks *pk) {
  rp_io_afile a; /* a temporary renamed into place: no half figure under path */
  RP_TRY(rp_io_afile_open(&a, path));
  if (write_figure(a.f, title, st, w, pk) != RP_OK) {
    rp_io_afile_abort(&a);
    return rp_err(RP_EIO, "cannot write the step profile figure %s", path);
  }
  return rp_io_afile_commit(&a);
}
