/* Stage assignment: contiguous layers per pipeline stage, uneven allowed. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_model.h"

rp_status rp_assign_stages(int L, int S, const char *spec, rp_stage_spec *out) {
  if (S < 1 || S > L)
    return rp_err(RP_EINVAL, "%d pipeline stages cannot share %d layers; use at most %d stages",
                  S, L, L);
  int n[4096];
  if (S > 4096) return rp_err(RP_EINVAL, "too many pipeline stages (%d)", S);
  if (!spec || !spec[0]) {
    for (int s = 0; s < S; s++) n[s] = L / S + (s < L % S);
  } else {
    const char *p = spec;
    int count = 0, sum = 0;
    while (*p) {
      char *end;
      errno = 0;  /* overflow must not wrap (4294967297 is not 1) */
      long v = strtol(p, &end, 10);
      if (end == p || errno == ERANGE || v < 1 || v > L || (*end && (*end != ',' || !end[1])))
        return rp_err(RP_EINVAL, "--pp-layers '%s' is not a list of layer counts in 1..%d "
                      "(--layers) like 3,3,2", spec, L);
      if (count < S) n[count] = (int)v;
      count++;
      sum += (int)v;
      p = *end ? end + 1 : end;
    }
    if (count != S || sum != L)
      return rp_err(RP_EINVAL, "--pp-layers '%s' gives %d stages and %d layers; it needs %d "
                    "numbers (pp x vpp) summing to --layers %d", spec, count, sum, S, L);
  }
  int first = 0;
  for (int s = 0; s < S; s++) {
    out[s] = (rp_stage_spec){.first_layer = first, .num_layers = n[s], .has_embed = s == 0,
                             .has_head = s == S - 1};
    first += n[s];
  }
  return RP_OK;
}
