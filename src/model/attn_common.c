/* What every attention backend shares: preparing a micro-batch (the shape and
 * document-layout checks done once per batch instead of once per layer call)
 * and destruction. */
#include <string.h>

#include "ringpipe/rp_docs.h"
#include "ringpipe/rp_model.h"

rp_status rp_attn_prepare(const rp_attn_backend *a, rp_attn_batch *batch, int B, int T, int C,
                          int NH, const rp_docs *docs) {
  memset(batch, 0, sizeof *batch);
  if (!a || !a->prepare) return rp_err(RP_EINVAL, "attention backend has no prepare");
  rp_status s = a->prepare(a, batch, B, T, C, NH, docs);
  if (s != RP_OK) memset(batch, 0, sizeof *batch);
  return s;
}

int rp_attn_batch_ready(const rp_attn_batch *batch, const rp_attn_backend *a, int B, int T,
                        const rp_docs *docs) {
  return batch->backend == a && a != NULL && batch->B == B && batch->T == T &&
         batch->docs == docs;
}

rp_status rp_attn_check_local(rp_attn_batch *batch, const rp_attn_backend *a, int B, int T,
                              int C, int NH, const rp_docs *docs) {
  if (B < 1 || T < 1)
    return rp_err(RP_EINVAL, "%s attention: batch %d x %d needs B, T >= 1", a->name, B, T);
  if (NH < 1 || C < 1 || C % NH != 0)
    return rp_err(RP_EINVAL, "%s attention: heads %d must divide channels %d", a->name, NH, C);
  if (docs) RP_TRY(rp_docs_check(docs, B, T));
  *batch = (rp_attn_batch){.backend = a, .B = B, .T = T, .C = C, .NH = NH, .docs = docs};
  return RP_OK;
}

void rp_attn_destroy(rp_attn_backend *a) {
  if (a && a->destroy) a->destroy(a);
}
