/* ringpipe eval: validation loss of a checkpoint. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_data.h"
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_grid.h"
#include "ringpipe/rp_train.h"

typedef enum { SPLIT_VAL, SPLIT_TRAIN } eval_split;  /* --split val|train */
static const char *const split_names[] = {"val", "train"};

typedef struct {
  char checkpoint[RP_OPT_STRLEN], data[RP_OPT_STRLEN];
  eval_split split;
  rp_attn_kind attention;
  int batch, seq, batches, threads;
} eval_opts;

#define O(f) offsetof(eval_opts, f)
#define E(f) RP_OPT_ENUM_FIELD(eval_opts, f)
static const rp_opt eval_table[] = {
    {"checkpoint", RP_OPT_STR, O(checkpoint), "", 0, 0, NULL,
     "checkpoint directory or llm.c model .bin"},
    {"data", RP_OPT_STR, O(data), "", 0, 0, NULL, "directory with token shards (llm.c format)"},
    {"split", RP_OPT_ENUM, E(split), "val", 0, 0, "val|train", "which shards to evaluate"},
    {"batch", RP_OPT_INT, O(batch), "4", 1, 65536, NULL, "sequences per batch"},
    {"seq", RP_OPT_INT, O(seq), "256", 1, 1048576, NULL, "sequence length (<= the model's)"},
    {"batches", RP_OPT_INT, O(batches), "16", 1, 100000000, NULL, "batches to average over"},
    {"attention", RP_OPT_ENUM, E(attention), "naive", 0, 0, "naive|flash", "attention kernel"},
    {"threads", RP_OPT_INT, O(threads), "0", 0, 1024, NULL, "compute threads (0: all cores)"},
};
#undef O
#undef E

static rp_status evaluate(const eval_opts *o, const rp_chunk *m, rp_pool *pool, double *loss) {
  if (o->seq > m->cfg.T)
    return rp_err(RP_EINVAL, "--seq %d is longer than the model's %d positions", o->seq, m->cfg.T);
  rp_loader *l = NULL;
  RP_TRY(rp_loader_open(&l, o->data, split_names[o->split], o->batch, o->seq, 1, 0, 0, 1));
  rp_status vs = rp_loader_set_vocab(l, m->cfg.V);
  if (vs != RP_OK) {
    rp_loader_close(l);
    return vs;
  }
  rp_exec x = {.pool = pool,
               .attn = rp_attn_of_kind(o->attention)};
  rp_layer_acts *lv = calloc(m->spec.num_layers, sizeof *lv);
  void *mem = rp_alloc(rp_acts_bytes(m, x.attn, o->batch, o->seq), RP_MEM_ACTS);
  rp_status s = (lv && mem) ? RP_OK : RP_ENOMEM;
  double sum = 0;
  long count = 0;
  rp_acts a;
  if (s == RP_OK) rp_acts_bind(&a, lv, m, x.attn, mem, o->batch, o->seq);
  for (int b = 0; b < o->batches && s == RP_OK; b++) {
    s = rp_loader_next(l, a.tokens, a.targets);
    for (int i = 0; i < o->batch * o->seq && s == RP_OK; i++) a.pos[i] = i % o->seq;
    int valid = 0;
    if (s == RP_OK) sum += rp_chunk_forward(m, &a, &valid, &x);
    count += valid;
  }
  *loss = count ? sum / count : 0;
  free(lv);
  rp_free(mem);
  rp_loader_close(l);
  return s;
}

int rp_cmd_eval(int argc, char **argv) {
  eval_opts o;
  int rc = rp_cli_parse("eval", "ringpipe eval --checkpoint DIR --data DIR [options]",
                        "Mean cross-entropy of a model on token shards.", eval_table,
                        sizeof eval_table / sizeof *eval_table, &o, argc, argv);
  if (rc >= 0) return rc;
  if (rp_mpi_world_rank() != 0) return 0;
  if (!o.checkpoint[0] || !o.data[0])
    return rp_cli_fail("eval", rp_err(RP_EINVAL, "--checkpoint and --data are both required"));
  rp_chunk m;
  rp_pool *pool = NULL;
  rp_status s = rp_cli_load_model(o.checkpoint, &m);
  if (s == RP_OK) s = rp_pool_create(&pool, o.threads > 0 ? o.threads : 2, 1);
  double loss = 0;
  if (s == RP_OK) s = evaluate(&o, &m, pool, &loss);
  if (s == RP_OK)
    printf("%s loss %.4f over %d batches of %d x %d tokens\n", split_names[o.split], loss, o.batches, o.batch,
           o.seq);
  if (pool) rp_pool_destroy(pool);
  rp_chunk_free(&m);
  return s == RP_OK ? 0 : rp_cli_fail("eval", s);
}
