/* rp_schedule_make: what an executor runs, from a generator name or a CSV
 * file: generate (schedule.c) or load (schedule_csv.c), validate
 * (schedule_sim.c), lower SEND/RECV in (schedule_lower.c), validate again.
 * It sits above those files, so that none of them needs another's. */
#include <stdio.h>
#include <string.h>

#include "ringpipe/rp_schedule.h"

static int is_csv_name(const char *name) {
  size_t l = strlen(name);
  return strchr(name, '/') != NULL || (l > 4 && !strcmp(name + l - 4, ".csv"));
}

static rp_status check_dim(const char *what, int want, int got, const char *path) {
  if (want > 0 && want != got)
    return rp_err(RP_EINVAL, "%s has %s = %d but %d was asked for; drop the option or fix it",
                  path, what, got, want);
  return RP_OK;
}

rp_status rp_schedule_make(const char *name_or_csv, int p, int v, int m, rp_schedule **out) {
  *out = NULL;
  rp_schedule *s = NULL, *low = NULL;
  if (is_csv_name(name_or_csv)) {
    RP_TRY(rp_schedule_csv_load(name_or_csv, &s));
    rp_status st = check_dim("p (rows)", p, s->p, name_or_csv);
    if (st == RP_OK) st = check_dim("v (chunks)", v, s->v, name_or_csv);
    if (st == RP_OK) st = check_dim("m (micro-batches)", m, s->m, name_or_csv);
    if (st != RP_OK) {
      rp_schedule_free(s);
      return st;
    }
  } else {
    RP_TRY(rp_schedule_generate(name_or_csv, p, v, m, &s));
    if (rp_schedule_validate(s, NULL) != RP_OK) {
      char why[512];
      snprintf(why, sizeof why, "%s", rp_errmsg());
      rp_schedule_free(s);
      return rp_err(RP_EINTERNAL, "generator %s p=%d v=%d m=%d is broken: %s", name_or_csv, p,
                    v, m, why);
    }
  }
  if (s->lowered || s->p == 1) {
    *out = s;
    return RP_OK;
  }
  rp_status st = rp_schedule_lower(s, &low, NULL);
  rp_schedule_free(s);
  if (st != RP_OK) return st;
  if (rp_schedule_validate(low, NULL) != RP_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", rp_errmsg());
    rp_schedule_free(low);
    return rp_err(RP_EINTERNAL, "lowering produced an invalid schedule: %s", why);
  }
  *out = low;
  return RP_OK;
}
