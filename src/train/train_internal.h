/* Pieces of the trainer shared between its files (not a public API). */
#ifndef RP_TRAIN_INTERNAL_H
#define RP_TRAIN_INTERNAL_H

#include <stdio.h>

#include "ringpipe/rp_train.h"

rp_status rp_builtin_prepare(const char *dir);          /* builtin corpus -> shards */
size_t rp_builtin_corpus(const unsigned char **data);   /* embedded text */
rp_status rp_trainer_resume(rp_trainer *t, const char *dir);
void rp_optimizer_step(rp_trainer *t, float lr, float grad_scale);
/* After the optimizer step: the step counter and the bf16 weight copies. */
void rp_engine_finish_update(rp_trainer *t);
/* Whether the run's matmuls pack their weights (the own fp32 GEMM, or bf16), so
 * that --weight-cache can keep the packs (run.c). */
int rp_trainer_packs_weights(const rp_trainer *t);
/* --post-validate (post_validate.c): copy what a step changes and step at
 * scale 1 before the global norm and loss are known; then, given whether they
 * are finite and the clipping scale, keep it (0) or restore the copy and take
 * the synchronous step (1; none when not finite). */
rp_status rp_post_validation_speculate(rp_trainer *t, float lr);
int rp_post_validation_check(rp_trainer *t, float lr, int finite, float scale);
void rp_post_validation_free(rp_trainer *t);
double rp_grad_sumsq(rp_trainer *t);

/* Collective over the pipeline group; rank 0 prints (and appends to metrics). */
rp_status rp_pipeline_report(rp_trainer *t, FILE *metrics);

/* Every rank's local status agreed over the world in one watched all-reduce:
 * when any rank failed, all return the lowest failing rank's status and
 * message (so one message is printed and the exit status is the same). With
 * stop non-NULL the stop signals ride along: *stop is a signal any rank got. */
rp_status rp_train_agree(rp_trainer *t, rp_status local, const char *what, int *stop);

/* Checkpoint directories in --out (ckpt_dirs.c; the file system calls are
 * world rank 0's): where a save of `step` goes, what happens around it
 * (OUT/ckpt symlink, pruning to --keep-ckpts), --resume auto (*resolved ""
 * when there is none; note: the line to print), stale temporaries of dead
 * processes (the count, their names in list). */
void rp_ckpt_dir_for(const rp_trainer *t, int step, char *buf, size_t cap);
rp_status rp_ckpt_before_save(const rp_trainer *t);
rp_status rp_ckpt_after_save(const rp_trainer *t, int step, const char *dir);
rp_status rp_resume_auto(const char *out, char *resolved, size_t cap, char *note, size_t ncap);
int rp_reclaim_stale(const char *out, char *list, size_t lcap);

/* OUT/metrics.jsonl opened for appending; on resume (step > 0) first cut to
 * the lines up to that step. */
rp_status rp_metrics_open(const char *out, int step, FILE **f);

/* Output paths checked before anything is created: a directory that exists or
 * can be created and is writable; a file that can be written (its directory
 * as for a directory). flag names the option in messages. */
rp_status rp_check_out_dir(const char *dir, const char *flag);
rp_status rp_check_out_file(const char *path, const char *flag);

/* Tensor-parallel checkpoints (tp_checkpoint.c): a whole (tp = 1) copy of a
 * chunk with its AdamW state. rp_tp_gather_whole: collective over tp_comm,
 * tp rank 0 gets chunk c's whole params and m, v (the local arrays); the
 * others get nothing. rp_tp_load_whole: reads dir (a checkpoint with m, v
 * non-NULL; else weights as rp_load_weights reads them) into a whole copy and
 * keeps this rank's slice in chunk c (and m, v). */
typedef struct {
  rp_chunk chunk;
  float *m, *v;
} rp_tp_whole;
rp_status rp_tp_gather_whole(const rp_trainer *t, int c, const float *m, const float *v,
                             rp_tp_whole *w);
rp_status rp_tp_load_whole(const rp_trainer *t, int c, const char *dir, float *m, float *v);
void rp_tp_whole_free(rp_tp_whole *w);

/* Tensor parallelism's reports (tp_report.c, world rank 0; nothing at tp 1):
 * activation memory and communication formulas at start-up, the last step's
 * measured communication after the run. */
void rp_tp_print_startup(const rp_trainer *t);
void rp_tp_print_summary(const rp_trainer *t);
/* One layer's forward under the run's tp (and sp) with its real shapes, as SVG
 * (tp_figure.c); train writes it to OUT/tp_layer.svg. */
rp_status rp_tp_write_figure(const rp_trainer *t, const char *path);

struct rp_loader;
/* Loads micro-batch mb from l into the full and the local (cp shard) buffers. */
rp_status rp_trainer_load_batch(rp_trainer *t, struct rp_loader *l, int mb);

/* memory_metrics.c: one layer's activation floats per micro-batch by the
 * formula, and the last metrics line of a run: peaks by category (rank 0) and,
 * at pp = 1, the formulas' values. */
double rp_train_layer_act_floats(const rp_trainer *t);
void rp_train_write_memory_metrics(FILE *metrics, const rp_trainer *t);

#endif
