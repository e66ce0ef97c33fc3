/* Pieces of the trainer shared between its files (not a public API). */
#ifndef RP_TRAIN_INTERNAL_H
#define RP_TRAIN_INTERNAL_H

#include <stdio.h>

#include "ringpipe/rp_train.h"

int rp_default_threads(void);
rp_status rp_builtin_prepare(const char *dir);          /* builtin corpus -> shards */
size_t rp_builtin_corpus(const unsigned char **data);   /* embedded text */
rp_status rp_trainer_resume(rp_trainer *t, const char *dir);
void rp_optimizer_step(rp_trainer *t, float lr, float grad_scale);
double rp_grad_sumsq(rp_trainer *t);

/* Collective over the pipeline group; rank 0 prints (and appends to metrics). */
rp_status rp_pipeline_report(rp_trainer *t, FILE *metrics);

struct rp_loader;
/* Loads micro-batch mb from l into the full and the local (cp shard) buffers. */
rp_status rp_trainer_load_batch(rp_trainer *t, struct rp_loader *l, int mb);

#endif
