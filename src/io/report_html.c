/* `ringpipe report RUN_DIR`: one self-contained HTML page (inline SVG and CSS,
 * nothing fetched) from what a run left in its directory: metrics.jsonl (loss,
 * validation, tokens/s, MFU, learning rate, gradient norm, RL reward, KL and
 * held-out accuracy; memory peaks by category with their formulas; the pipeline
 * report), ckpt/meta.json (the model), step_profile.svg (train --profile) and
 * pipeline.svg (measured beside simulated timeline). A small inline script checks on load that every chart
 * has data and marks the page (body data-check), for the browser test. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io_fs.h"
#include "ringpipe/rp_json.h"
#include "ringpipe/rp_report.h"

#define CHART_W 560
#define CHART_H 280
#define PAD_L 64
#define PAD_R 16
#define PAD_T 30
#define PAD_B 40
#define MAX_SERIES 64

typedef struct {
  double step, v;
} point;

typedef struct {
  char name[64];
  point *p;
  int n, cap;
} series;

typedef struct {
  series s[MAX_SERIES];
  int ns;
  char *memory, *formula, *pipeline;  /* the last such JSON objects, or NULL */
  int last_step;
} run_data;

static series *series_get(run_data *d, const char *name) {
  for (int i = 0; i < d->ns; i++)
    if (!strcmp(d->s[i].name, name)) return &d->s[i];
  if (d->ns == MAX_SERIES) return NULL;
  series *s = &d->s[d->ns++];
  snprintf(s->name, sizeof s->name, "%s", name);
  return s;
}

static const series *series_find(const run_data *d, const char *name) {
  for (int i = 0; i < d->ns; i++)
    if (!strcmp(d->s[i].name, name) && d->s[i].n) return &d->s[i];
  return NULL;
}

static rp_status series_add(series *s, double step, double v) {
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 64;
    point *np = realloc(s->p, (size_t)cap * sizeof *np);
    if (!np) return rp_err(RP_ENOMEM, "out of memory");
    s->p = np;
    s->cap = cap;
  }
  s->p[s->n++] = (point){step, v};
  return RP_OK;
}

static void keep_object(char **slot, const char *v, size_t n) {
  free(*slot);
  *slot = strndup(v, n);
}

/* One metrics line: numbers become points of their series at the line's step;
 * the memory and pipeline objects are kept (the last one wins). */
static rp_status take_line(run_data *d, const char *line) {
  if (rp_json_validate(line) != RP_OK) return RP_OK;  /* a torn last line */
  int64_t step;
  if (rp_json_get_int64(line, "step", &step) == RP_OK) d->last_step = (int)step;
  rp_json_iter it;
  char key[64];
  const char *v;
  size_t n;
  int r;
  if (rp_json_iter_begin(&it, line) != RP_OK || it.close != '}') return RP_OK;
  while ((r = rp_json_iter_next(&it, key, sizeof key, &v, &n)) == 1) {
    if (!strcmp(key, "memory_mib")) keep_object(&d->memory, v, n);
    if (!strcmp(key, "memory_formula_mib")) keep_object(&d->formula, v, n);
    if (!strcmp(key, "pipeline")) keep_object(&d->pipeline, v, n);
    if (!strcmp(key, "step") || !((*v >= '0' && *v <= '9') || *v == '-')) continue;
    series *s = series_get(d, key);
    if (s) RP_TRY(series_add(s, d->last_step, strtod(v, NULL)));
  }
  return RP_OK;
}

static rp_status read_metrics(const char *run_dir, run_data *d) {
  char path[RP_IO_PATH + 32];
  snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
  char *text;
  if (!rp_io_exists(path))
    return rp_err(RP_EINVAL, "'%s' has no metrics.jsonl: pass the --out directory of a "
                  "`ringpipe train` (or sft/grpo/ppo) run", run_dir);
  RP_TRY(rp_io_read_text(path, &text, NULL));
  rp_status s = RP_OK;
  for (char *line = strtok(text, "\n"); line && s == RP_OK; line = strtok(NULL, "\n"))
    s = take_line(d, line);
  free(text);
  return s;
}

static void run_data_free(run_data *d) {
  for (int i = 0; i < d->ns; i++) free(d->s[i].p);
  free(d->memory);
  free(d->formula);
  free(d->pipeline);
}

/* ---- HTML and SVG pieces */

static void put_escaped(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '&') fputs("&amp;", f);
    else if (*s == '"') fputs("&quot;", f);
    else fputc(*s, f);
  }
}

/* A round step for about `want` ticks over span. */
static double nice_step(double span, int want) {
  double raw = span / want, mag = pow(10, floor(log10(raw))), r = raw / mag;
  return (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
}

typedef struct {
  double x0, x1, y0, y1;
} bounds;

static bounds chart_bounds(const series *const *s, int n) {
  bounds b = {INFINITY, -INFINITY, INFINITY, -INFINITY};
  for (int k = 0; k < n; k++)
    for (int i = 0; i < s[k]->n; i++) {
      const point *p = &s[k]->p[i];
      if (!isfinite(p->v)) continue;
      b.x0 = fmin(b.x0, p->step), b.x1 = fmax(b.x1, p->step);
      b.y0 = fmin(b.y0, p->v), b.y1 = fmax(b.y1, p->v);
    }
  if (b.x1 <= b.x0) b.x0 -= 1, b.x1 += 1;
  if (b.y1 <= b.y0) {
    double pad = fabs(b.y0) > 0 ? fabs(b.y0) * 0.1 : 1;
    b.y0 -= pad, b.y1 += pad;
  }
  return b;
}

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"};

static void chart_axes(FILE *f, bounds b, double sx, double sy, const char *xlabel) {
  double ys = nice_step(b.y1 - b.y0, 5), xs = nice_step(b.x1 - b.x0, 6);
  for (double y = ceil(b.y0 / ys) * ys; y <= b.y1 + ys * 1e-9; y += ys) {
    double py = PAD_T + (b.y1 - y) * sy;
    fprintf(f, "<line class=\"grid\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>"
            "<text class=\"tick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.4g</text>\n",
            PAD_L, CHART_W - PAD_R, py, py, PAD_L - 6, py + 4, fabs(y) < ys * 1e-9 ? 0 : y);
  }
  for (double x = ceil(b.x0 / xs) * xs; x <= b.x1 + xs * 1e-9; x += xs) {
    double px = PAD_L + (x - b.x0) * sx;
    fprintf(f, "<text class=\"tick\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.6g</text>\n",
            px, CHART_H - PAD_B + 16, x);
  }
  fprintf(f, "<rect class=\"frame\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/>\n"
          "<text class=\"axis\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", PAD_L,
          PAD_T, CHART_W - PAD_L - PAD_R, CHART_H - PAD_T - PAD_B, (PAD_L + CHART_W - PAD_R) / 2,
          CHART_H - 6, xlabel);
}

/* A line chart of the given series (those with points); nothing if none has. */
static void line_chart(FILE *f, const char *title, const run_data *d, const char *const *names) {
  const series *s[5];
  int n = 0;
  for (int k = 0; names[k] && n < 5; k++)
    if (series_find(d, names[k])) s[n++] = series_find(d, names[k]);
  if (!n) return;
  bounds b = chart_bounds(s, n);
  double sx = (CHART_W - PAD_L - PAD_R) / (b.x1 - b.x0);
  double sy = (CHART_H - PAD_T - PAD_B) / (b.y1 - b.y0);
  fprintf(f, "<figure><svg class=\"chart\" data-title=\"%s\" width=\"%d\" height=\"%d\" "
          "viewBox=\"0 0 %d %d\" xmlns=\"http://www.w3.org/2000/svg\">\n"
          "<text class=\"title\" x=\"%d\" y=\"18\">%s</text>\n", title, CHART_W, CHART_H,
          CHART_W, CHART_H, PAD_L, title);
  chart_axes(f, b, sx, sy, "step");
  for (int k = 0; k < n; k++) {
    const char *col = palette[k % 5];
    fprintf(f, "<polyline class=\"line\" data-series=\"");
    put_escaped(f, s[k]->name);
    fprintf(f, "\" stroke=\"%s\" points=\"", col);
    for (int i = 0; i < s[k]->n; i++)
      if (isfinite(s[k]->p[i].v))
        fprintf(f, "%.1f,%.1f ", PAD_L + (s[k]->p[i].step - b.x0) * sx,
                PAD_T + (b.y1 - s[k]->p[i].v) * sy);
    fprintf(f, "\"/>\n");
    if (s[k]->n == 1)  /* one point draws no line: mark it */
      fprintf(f, "<circle class=\"pt\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
              PAD_L + (s[k]->p[0].step - b.x0) * sx, PAD_T + (b.y1 - s[k]->p[0].v) * sy, col);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"10\" height=\"10\" fill=\"%s\"/><text "
            "class=\"legend\" x=\"%d\" y=\"%d\">", CHART_W - PAD_R - 190, PAD_T + 6 + 16 * k,
            col, CHART_W - PAD_R - 176, PAD_T + 15 + 16 * k);
    put_escaped(f, s[k]->name);
    fprintf(f, " (last %.5g)</text>\n", s[k]->p[s[k]->n - 1].v);
  }
  fprintf(f, "</svg></figure>\n");
}

/* ---- sections */

static void section_model(FILE *f, const char *run_dir) {
  char path[RP_IO_PATH + 32], *meta = NULL;
  snprintf(path, sizeof path, "%s/ckpt/meta.json", run_dir);
  if (!rp_io_exists(path) || rp_io_read_text(path, &meta, NULL) != RP_OK) {
    fprintf(f, "<p class=\"note\">no checkpoint metadata (ckpt/meta.json) in the run "
            "directory</p>\n");
    return;
  }
  static const char *const keys[] = {"config.L", "config.C", "config.NH", "config.T",
                                     "config.V", "layout.dp", "layout.pp", "layout.cp", "step"};
  static const char *const label[] = {"layers", "channels", "heads", "positions", "vocabulary",
                                      "dp", "pp", "cp", "checkpoint step"};
  fprintf(f, "<table class=\"kv\"><tr>");
  for (int i = 0; i < 9; i++) {
    int64_t v;
    if (rp_json_get_int64(meta, keys[i], &v) == RP_OK)
      fprintf(f, "<th>%s</th><td>%lld</td>", label[i], (long long)v);
  }
  fprintf(f, "</tr></table>\n");
  free(meta);
}

static void section_memory(FILE *f, const run_data *d) {
  if (!d->memory) return;
  static const char *const cats[] = {"params", "grads", "optimizer", "activations",
                                     "workspace", "comm", "data", "total", "rss"};
  double meas[9], form[9], top = 0;
  fprintf(f, "<h2>Memory (rank 0 peaks)</h2>\n<table><tr><th>category</th><th>measured "
          "MiB</th><th>formula MiB</th><th>measured / formula</th></tr>\n");
  for (int i = 0; i < 9; i++) {
    char k[32];
    snprintf(k, sizeof k, "%s", cats[i]);
    meas[i] = form[i] = NAN;
    rp_json_get_number(d->memory, k, &meas[i]);
    if (d->formula) rp_json_get_number(d->formula, k, &form[i]);
    if (!isfinite(meas[i])) continue;  /* not recorded (an older run) */
    fprintf(f, "<tr><td>%s</td><td>%.3f</td>", cats[i], meas[i]);
    if (isfinite(form[i]))
      fprintf(f, "<td>%.3f</td><td>%.3f</td></tr>\n", form[i], form[i] > 0 ? meas[i] / form[i] : 1);
    else
      fprintf(f, "<td>&mdash;</td><td>&mdash;</td></tr>\n");
    if (i < 7) top = fmax(top, fmax(isfinite(meas[i]) ? meas[i] : 0, isfinite(form[i]) ? form[i] : 0));
  }
  fprintf(f, "</table>\n");
  if (!(top > 0)) return;
  int h = 7 * 34 + 40;
  fprintf(f, "<figure><svg class=\"chart bars\" data-title=\"memory\" width=\"%d\" height=\"%d\" "
          "xmlns=\"http://www.w3.org/2000/svg\"><text class=\"title\" x=\"%d\" y=\"18\">memory "
          "by category: measured (dark) and formula (light), MiB</text>\n", CHART_W, h, PAD_L + 40);
  for (int i = 0; i < 7; i++) {
    double y = 30 + 34 * i, w = CHART_W - 140 - PAD_R;
    fprintf(f, "<text class=\"tick\" x=\"96\" y=\"%.0f\" text-anchor=\"end\">%s</text>\n",
            y + 14, cats[i]);
    if (isfinite(meas[i]))
      fprintf(f, "<rect class=\"bar\" x=\"104\" y=\"%.0f\" width=\"%.1f\" height=\"12\"/><text "
              "class=\"tick\" x=\"%.1f\" y=\"%.0f\">%.3f</text>\n", y, w * meas[i] / top + 0.5,
              110 + w * meas[i] / top, y + 10, meas[i]);
    if (isfinite(form[i]))
      fprintf(f, "<rect class=\"bar formula\" x=\"104\" y=\"%.0f\" width=\"%.1f\" height=\"12\"/>"
              "\n", y + 14, w * form[i] / top + 0.5);
  }
  fprintf(f, "</svg></figure>\n");
}

static void section_pipeline(FILE *f, const run_data *d, const char *run_dir) {
  if (!d->pipeline) return;
  char sched[32] = "?";
  rp_json_get_string(d->pipeline, "schedule", sched, sizeof sched);
  fprintf(f, "<h2>Pipeline (last step, schedule ");
  put_escaped(f, sched);
  fprintf(f, ")</h2>\n<table><tr><th></th><th>measured</th><th>simulated</th></tr>\n");
  static const char *const rows[][3] = {
      {"bubble (idle / total)", "bubble_total", "predicted_bubble_total"},
      {"bubble (idle / ideal)", "bubble_ideal", "predicted_bubble_ideal"},
      {"makespan ms", "makespan_ms", "predicted_makespan_ms"}};
  for (int r = 0; r < 3; r++) {
    double a = NAN, b = NAN;
    rp_json_get_number(d->pipeline, rows[r][1], &a);
    rp_json_get_number(d->pipeline, rows[r][2], &b);
    fprintf(f, "<tr><td>%s</td><td>%.4f</td><td>%.4f</td></tr>\n", rows[r][0], a, b);
  }
  fprintf(f, "</table>\n<table><tr><th>rank</th><th>peak in-flight micro-batches</th>"
          "<th>activation MiB (slots + W stash)</th></tr>\n");
  for (int r = 0; r < 4096; r++) {
    char k1[32], k2[32];
    double live, mib;
    snprintf(k1, sizeof k1, "peak_live.%d", r);
    snprintf(k2, sizeof k2, "act_mib.%d", r);
    if (rp_json_get_number(d->pipeline, k1, &live) != RP_OK ||
        rp_json_get_number(d->pipeline, k2, &mib) != RP_OK)
      break;
    fprintf(f, "<tr><td>%d</td><td>%.0f</td><td>%.3f</td></tr>\n", r, live, mib);
  }
  fprintf(f, "</table>\n");
  char path[RP_IO_PATH + 32], *svg = NULL;
  snprintf(path, sizeof path, "%s/pipeline.svg", run_dir);
  if (rp_io_exists(path) && rp_io_read_text(path, &svg, NULL) == RP_OK && !strncmp(svg, "<svg", 4))
    fprintf(f, "<figure class=\"timeline\">%s</figure>\n", svg);
  else
    fprintf(f, "<p class=\"note\">no pipeline.svg in the run directory</p>\n");
  free(svg);
}

/* OUT/step_profile.svg (train --profile), as drawn, when the run has one. */
static void section_profile(FILE *f, const char *run_dir) {
  char path[RP_IO_PATH + 32], *svg = NULL;
  snprintf(path, sizeof path, "%s/step_profile.svg", run_dir);
  if (!rp_io_exists(path)) return;
  if (rp_io_read_text(path, &svg, NULL) == RP_OK && !strncmp(svg, "<svg", 4))
    fprintf(f, "<h2>Step profile</h2>\n<p class=\"note\">where a step's time goes (--profile): "
               "each bar dark over the time its work takes at the machine's peak</p>\n"
               "<figure class=\"profile\">%s</figure>\n", svg);
  free(svg);
}

static const char css[] =
    "body{font-family:Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1200px}"
    "h1{font-size:22px}h2{font-size:17px;margin-top:28px}figure{display:inline-block;margin:6px}"
    "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;"
    "font-size:13px;text-align:right}th{background:#f3f3f3}.note{color:#777}"
    "svg.chart .grid{stroke:#eee}svg.chart .frame{fill:none;stroke:#999}"
    "svg.chart .line{fill:none;stroke-width:1.8}svg.chart .tick,svg.chart .legend{font-size:11px}"
    "svg.chart .axis{font-size:12px}svg.chart .title{font-size:14px;font-weight:bold}"
    "svg.chart .bar{fill:#1f77b4}svg.chart .bar.formula{fill:#aec7e8}";

/* Marks the page: every chart has points (polyline or bar) or data-check names the empty. */
static const char check_js[] =
    "(function(){var bad=[],charts=document.querySelectorAll('svg.chart');"
    "charts.forEach(function(s){var n=s.querySelectorAll('rect.bar').length;"
    "s.querySelectorAll('polyline').forEach(function(p){n+=p.points.numberOfItems;});"
    "if(!n)bad.push(s.getAttribute('data-title'));});"
    "document.body.setAttribute('data-charts',String(charts.length));"
    "document.body.setAttribute('data-check',charts.length&&!bad.length?'ok':"
    "'empty charts: '+(bad.join(', ')||'none drawn'));})();";

static rp_status write_page(FILE *f, const char *run_dir, const run_data *d) {
  fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ringpipe "
          "report: ");
  put_escaped(f, run_dir);
  fprintf(f, "</title><style>%s</style></head>\n<body>\n<h1>ringpipe run report: ", css);
  put_escaped(f, run_dir);
  fprintf(f, "</h1>\n<p>last step %d; self-contained page (inline SVG and CSS, no network)</p>\n",
          d->last_step);
  section_model(f, run_dir);
  fprintf(f, "<h2>Training</h2>\n");
  line_chart(f, "loss", d, (const char *const[]){"loss", "val_loss", NULL});
  line_chart(f, "tokens per second", d, (const char *const[]){"tokens_per_s", NULL});
  line_chart(f, "MFU", d, (const char *const[]){"mfu", NULL});
  line_chart(f, "learning rate", d, (const char *const[]){"lr", NULL});
  line_chart(f, "gradient norm", d, (const char *const[]){"grad_norm", NULL});
  if (series_find(d, "reward_mean") || series_find(d, "heldout_acc")) {
    fprintf(f, "<h2>Post-training</h2>\n");
    line_chart(f, "reward", d, (const char *const[]){"reward_mean", "heldout_reward", NULL});
    line_chart(f, "held-out accuracy", d, (const char *const[]){"heldout_acc", NULL});
    line_chart(f, "KL to the reference", d, (const char *const[]){"kl_ref", NULL});
  }
  section_memory(f, d);
  section_profile(f, run_dir);
  section_pipeline(f, d, run_dir);
  fprintf(f, "<script>%s</script>\n</body></html>\n", check_js);
  return ferror(f) ? rp_err(RP_EIO, "writing the report failed (disk full?)") : RP_OK;
}

rp_status rp_report_write(const char *run_dir, const char *out_path) {
  run_data d = {0};
  rp_status s = read_metrics(run_dir, &d);
  rp_io_afile af;
  if (s == RP_OK) s = rp_io_afile_open(&af, out_path);
  if (s == RP_OK) {
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    s = mem ? write_page(mem, run_dir, &d) : rp_err(RP_ENOMEM, "out of memory");
    if (mem) fclose(mem);
    if (s == RP_OK) s = rp_io_afile_write(&af, buf, len);
    if (s == RP_OK)
      s = rp_io_afile_commit(&af);
    else
      rp_io_afile_abort(&af);
    free(buf);
  }
  run_data_free(&d);
  return s;
}
