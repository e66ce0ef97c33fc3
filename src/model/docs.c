/* Document layouts of packed batches (rp_docs.h): cu_seqlens per row, position
 * ids that restart per document and the visible key ranges attention needs. */
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_docs.h"

rp_status rp_docs_init(rp_docs *d, int B, int T) {
  memset(d, 0, sizeof *d);
  if (B < 1 || T < 1) return rp_err(RP_EINVAL, "document layout %d x %d needs B, T >= 1", B, T);
  d->B = B;
  d->T = T;
  d->ndocs = rp_alloc(sizeof(int) * (size_t)B, RP_MEM_DATA);
  d->cu = rp_alloc(sizeof(int32_t) * (size_t)B * (T + 1), RP_MEM_DATA);
  if (!d->ndocs || !d->cu) {
    rp_docs_free(d);
    return rp_err(RP_ENOMEM, "out of memory for a %d x %d document layout", B, T);
  }
  for (int b = 0; b < B; b++) {
    int32_t one = T;
    rp_docs_set_row(d, b, &one, 1);
  }
  return RP_OK;
}

void rp_docs_free(rp_docs *d) {
  rp_free(d->ndocs);
  rp_free(d->cu);
  rp_free(d->gpos);
  memset(d, 0, sizeof *d);
}

rp_status rp_docs_set_row(rp_docs *d, int b, const int32_t *lens, int n) {
  if (b < 0 || b >= d->B || n < 1 || n > d->T)
    return rp_err(RP_EINVAL, "document row %d with %d documents does not fit a %d x %d layout",
                  b, n, d->B, d->T);
  int32_t *cu = d->cu + (long)b * (d->T + 1);
  long sum = 0;
  for (int i = 0; i < n; i++) {
    if (lens[i] < 1)
      return rp_err(RP_EINVAL, "document %d of row %d has length %d; lengths must be >= 1", i,
                    b, lens[i]);
    sum += lens[i];
  }
  if (sum != d->T)
    return rp_err(RP_EINVAL, "documents of row %d sum to %ld tokens, not the row's %d", b, sum,
                  d->T);
  cu[0] = 0;
  for (int i = 0; i < n; i++) cu[i + 1] = cu[i] + lens[i];
  d->ndocs[b] = n;
  return RP_OK;
}

rp_status rp_docs_check(const rp_docs *d, int B, int T) {
  if (!d || d->B != B || d->T != T)
    return rp_err(RP_EINVAL, "document layout is %d x %d, the batch %d x %d", d ? d->B : 0,
                  d ? d->T : 0, B, T);
  for (int b = 0; b < B; b++) {
    const int32_t *cu = rp_docs_row(d, b);
    int n = d->ndocs[b];
    if (n < 1 || n > T || cu[0] != 0 || cu[n] != T)
      return rp_err(RP_EINVAL, "row %d: %d documents with cu_seqlens from %d to %d; need 1..%d "
                    "documents covering 0..%d", b, n, n >= 1 && n <= T ? cu[0] : -1,
                    n >= 1 && n <= T ? cu[n] : -1, T, T);
    for (int i = 0; i < n; i++)
      if (cu[i + 1] <= cu[i])
        return rp_err(RP_EINVAL, "row %d: document %d spans [%d, %d); lengths must be >= 1", b,
                      i, cu[i], cu[i + 1]);
  }
  return RP_OK;
}

/* index of the document holding p: the last d with cu[d] <= p */
static int doc_of(const int32_t *cu, int n, int p) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (cu[mid] <= p) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

int rp_docs_start(const rp_docs *d, int b, int p) {
  const int32_t *cu = rp_docs_row(d, b);
  return cu[doc_of(cu, d->ndocs[b], p)];
}

void rp_docs_positions(const rp_docs *d, int32_t *pos) {
  for (int b = 0; b < d->B; b++) {
    const int32_t *cu = rp_docs_row(d, b);
    for (int i = 0; i < d->ndocs[b]; i++)
      for (int t = cu[i]; t < cu[i + 1]; t++) pos[(long)b * d->T + t] = t - cu[i];
  }
}

void rp_docs_self_ranges(const rp_docs *d, int32_t *kr) {
  for (int b = 0; b < d->B; b++) {
    const int32_t *cu = rp_docs_row(d, b);
    for (int i = 0; i < d->ndocs[b]; i++)
      for (int t = cu[i]; t < cu[i + 1]; t++) {
        kr[((long)b * d->T + t) * 2] = cu[i];
        kr[((long)b * d->T + t) * 2 + 1] = t + 1;
      }
  }
}

/* first index i in sorted v[0..n) with v[i] >= x */
static int lower_bound(const int32_t *v, int n, int x) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (v[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

void rp_docs_key_range(const rp_docs *d, int b, int qp, const int32_t *kpos, int nk, int32_t *lo,
                       int32_t *hi) {
  int s = rp_docs_start(d, b, qp);
  *lo = lower_bound(kpos, nk, s);
  *hi = lower_bound(kpos, nk, qp + 1);
  if (*hi < *lo) *hi = *lo;
}

double rp_docs_pairs(const rp_docs *d) {
  double n = 0;
  for (int b = 0; b < d->B; b++) {
    const int32_t *cu = rp_docs_row(d, b);
    for (int i = 0; i < d->ndocs[b]; i++) {
      double L = cu[i + 1] - cu[i];
      n += L * (L + 1) / 2;
    }
  }
  return n;
}
