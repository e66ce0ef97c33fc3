/* SVG figures of the serving experiments (rp_serve.h), written directly so
 * that the docs' figures need no plotting library. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ringpipe/rp_serve.h"

static FILE *svg_open(const char *path, int w, int h) {
  FILE *f = fopen(path, "w");
  if (!f) return NULL;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
          "fill=\"white\"/>\n", w, h);
  return f;
}

static rp_status svg_close(FILE *f, const char *path) {
  fputs("</svg>\n", f);
  return fclose(f) == 0 ? RP_OK : rp_err(RP_EIO, "cannot write %s", path);
}

rp_status rp_serve_svg_ladder(const char *path, const char *title, const char *const *labels,
                              const rp_serve_summary *sums, int n) {
  const int W = 760, row = 28, top = 40, left = 170, barw = 380;
  FILE *f = svg_open(path, W, top + row * n + 30);
  if (!f) return rp_err(RP_EIO, "cannot write %s: %s", path, strerror(errno));
  double mx = 0;
  for (int i = 0; i < n; i++) mx = fmax(mx, sums[i].jct);
  fprintf(f, "<text x=\"10\" y=\"22\" font-size=\"14\">%s</text>\n", title);
  for (int i = 0; i < n; i++) {
    double y = top + row * i, w = mx > 0 ? barw * sums[i].jct / mx : 0;
    fprintf(f, "<text x=\"%d\" y=\"%.0f\" text-anchor=\"end\">%s</text>\n", left - 8, y + 16,
            labels[i]);
    fprintf(f, "<rect x=\"%d\" y=\"%.0f\" width=\"%.1f\" height=\"20\" fill=\"%s\"/>\n", left, y,
            w, i == 0 ? "#c44" : i == n - 1 ? "#888" : "#48c");
    fprintf(f, "<text x=\"%.1f\" y=\"%.0f\">JCT %.1f s (%.2fx)  SNIC max/avg %.2f</text>\n",
            left + w + 6, y + 15, sums[i].jct, sums[i].jct > 0 ? sums[0].jct / sums[i].jct : 0,
            sums[i].snic_max_over_avg);
  }
  return svg_close(f, path);
}

static void box(FILE *f, double x, double y, const char *label) {
  fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"120\" height=\"44\" rx=\"6\" fill=\"#eef\" "
          "stroke=\"#335\"/>\n<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">%s</text>\n",
          x, y, x + 60, y + 27, label);
}

/* An arrow from (x0,y0) to (x1,y1), as wide as its share of the bytes. */
static void arrow(FILE *f, double x0, double y0, double x1, double y1, double bytes, double mx,
                  const char *color, const char *label) {
  double w = mx > 0 ? 1 + 9 * bytes / mx : 1;
  if (bytes <= 0) color = "#ccc";
  fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" "
          "stroke-width=\"%.1f\" marker-end=\"url(#a)\"/>\n", x0, y0, x1, y1, color, w);
  fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\" fill=\"#333\">%s %.1f GB</text>\n",
          (x0 + x1) / 2, (y0 + y1) / 2 - 6, label, bytes / 1e9);
}

static void paths_panel(FILE *f, double ox, const char *title, const rp_serve_summary *s, double mx) {
  fprintf(f, "<text x=\"%.0f\" y=\"24\" font-size=\"14\">%s: JCT %.1f s, SNIC max/avg %.2f</text>\n",
          ox + 10, title, s->jct, s->snic_max_over_avg);
  box(f, ox + 140, 50, "storage");
  box(f, ox + 20, 210, "PE nodes");
  box(f, ox + 260, 210, "DE nodes");
  arrow(f, ox + 170, 94, ox + 80, 206, s->path_bytes[0], mx, "#c44", "PE read");
  arrow(f, ox + 230, 94, ox + 320, 206, s->path_bytes[1], mx, "#48c", "DE read");
  arrow(f, ox + 260, 222, ox + 144, 222, s->path_bytes[1], mx, "#48c", "forward");
  arrow(f, ox + 140, 244, ox + 256, 244, s->path_bytes[2], mx, "#393", "hand-off");
}

rp_status rp_serve_svg_paths(const char *path, const rp_serve_summary *basic,
                             const rp_serve_summary *dual) {
  FILE *f = svg_open(path, 840, 290);
  if (!f) return rp_err(RP_EIO, "cannot write %s: %s", path, strerror(errno));
  fputs("<defs><marker id=\"a\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"4\" "
        "markerHeight=\"4\" orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"#333\"/>"
        "</marker></defs>\n", f);
  double mx = 0;
  for (int i = 0; i < 3; i++) mx = fmax(mx, fmax(basic->path_bytes[i], dual->path_bytes[i]));
  paths_panel(f, 0, "Basic", basic, mx);
  paths_panel(f, 420, "DualPath", dual, mx);
  fprintf(f, "<text x=\"10\" y=\"282\" fill=\"#555\">arrow width: bytes moved on that path "
          "(storage NIC reads; compute network forwarding and PE-to-DE hand-off)</text>\n");
  return svg_close(f, path);
}
