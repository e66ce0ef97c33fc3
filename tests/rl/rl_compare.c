/* Compares two metrics.jsonl files line by line: rl_compare A B key:rtol ...
 * Each listed key must be present in both lines or in neither; values must
 * agree within rtol relative to the larger magnitude (rtol 0: exactly).
 * Used to check that data-parallel jobs reproduce the single-rank job. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_json.h"

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s A.jsonl B.jsonl key:rtol [key:rtol ...]\n", argv[0]);
    return 2;
  }
  FILE *fa = fopen(argv[1], "r"), *fb = fopen(argv[2], "r");
  if (!fa || !fb) {
    fprintf(stderr, "cannot open %s or %s\n", argv[1], argv[2]);
    return 1;
  }
  static char la[8192], lb[8192];
  int line = 0, bad = 0, compared = 0;
  for (;;) {
    char *ra = fgets(la, sizeof la, fa), *rb = fgets(lb, sizeof lb, fb);
    if (!ra && !rb) break;
    line++;
    if (!ra || !rb) {
      fprintf(stderr, "%s has more lines than the other (line %d)\n", ra ? argv[1] : argv[2], line);
      return 1;
    }
    for (int k = 3; k < argc; k++) {
      char key[128];
      const char *colon = strchr(argv[k], ':');
      if (!colon || (size_t)(colon - argv[k]) >= sizeof key) return 2;
      memcpy(key, argv[k], (size_t)(colon - argv[k]));
      key[colon - argv[k]] = '\0';
      double rtol = atof(colon + 1), a, b;
      int ha = rp_json_get_number(la, key, &a) == RP_OK, hb = rp_json_get_number(lb, key, &b) == RP_OK;
      if (ha != hb) {
        fprintf(stderr, "line %d: %s present in only one file\n", line, key);
        bad++;
        continue;
      }
      if (!ha) continue;
      compared++;
      double tol = rtol * fmax(fabs(a), fabs(b));
      if (!(fabs(a - b) <= tol)) {
        fprintf(stderr, "line %d: %s differs: %.9g vs %.9g (rtol %g)\n", line, key, a, b, rtol);
        bad++;
      }
    }
  }
  printf("%d values compared over %d lines, %d mismatches\n", compared, line, bad);
  return bad || compared == 0 ? 1 : 0;
}
