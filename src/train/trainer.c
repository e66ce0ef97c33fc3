/* Trainer set-up and tear-down: grid, model, optimizer state, pool, activation
 * storage, data loaders. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_bf16.h"
#include "ringpipe/rp_checkpoint.h"
#include "ringpipe/rp_cp.h"
#include "ringpipe/rp_data.h"
#include "ringpipe/rp_flash.h"
#include "ringpipe/rp_isa.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_pipeline.h"
#include "ringpipe/rp_schedule.h"
#include "ringpipe/rp_sgemm.h"
#include "ringpipe/rp_stop.h"
#include "ringpipe/rp_tp.h"
#include "ringpipe/rp_docs.h"
#include "ringpipe/rp_train.h"
#include "ringpipe/rp_wait.h"
#include "train_internal.h"

int rp_default_threads(void) {
  cpu_set_t allowed;
  int ncpu = 1;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) ncpu = CPU_COUNT(&allowed);
  int local = rp_local_ranks();
  return ncpu / local > 0 ? ncpu / local : 1;
}

static rp_status make_dir(const char *path) {
  char tmp[RP_OPT_STRLEN];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    mkdir(tmp, 0755);
    *p = '/';
  }
  if (mkdir(tmp, 0755) != 0) {
    struct stat st;
    if (stat(tmp, &st) != 0 || !S_ISDIR(st.st_mode))
      return rp_err(RP_EIO, "cannot create output directory '%s'; pass a writable --out", path);
  }
  char probe[RP_OPT_STRLEN + 32];
  snprintf(probe, sizeof probe, "%s/.rp_write_probe", tmp);
  FILE *f = fopen(probe, "w");
  if (!f) return rp_err(RP_EIO, "output directory '%s' is not writable; pass a writable --out", path);
  fclose(f);
  remove(probe);
  return RP_OK;
}

/* What a split backward (I and W actions) excludes: sequence parallelism's
 * backward re-gathers what W would need stashed whole. (Recomputation works
 * with it: W recomputes what it reads, rp_chunk_backward_weight.) */
static rp_status check_split_backward_fits(const rp_trainer *t, int splits_backward) {
  if (!splits_backward) return RP_OK;
  if (t->o.sp)
    return rp_err(RP_EINVAL, "--sp cannot be combined with --schedule %s: it splits backward "
                  "into I and W actions, which sequence parallelism does not; use a schedule "
                  "without I/W (1f1b, interleaved) or --tp without --sp", t->o.schedule);
  return RP_OK;
}

/* The pipeline schedule (pp > 1), before the model: it says which stages
 * this rank holds. A generator that splits backward is refused with --sp
 * before its own checks, a CSV file once it is read. */
static rp_status make_schedule(rp_trainer *t) {
  const rp_train_opts *o = &t->o;
  if (rp_schedule_generator_splits_backward(o->schedule) == 1)
    RP_TRY(check_split_backward_fits(t, 1));
  RP_TRY(rp_schedule_make(o->schedule, t->grid.pp, o->vpp, o->microbatches, &t->sched));
  if (t->sched->v != o->vpp || t->sched->m != o->microbatches)
    return rp_err(RP_EINVAL, "schedule %s has v=%d m=%d but the run has --vpp %d "
                  "--microbatches %d", o->schedule, t->sched->v, t->sched->m, o->vpp,
                  o->microbatches);
  /* decided by what the schedule holds, whatever its name or file */
  return check_split_backward_fits(t, rp_schedule_splits_backward(t->sched));
}

/* model_T: rows of the position table, the longest sequence the model takes;
 * the training --seq may be shorter (e.g. when starting from GPT-2's 1024). */
static rp_status setup_model(rp_trainer *t, int model_T) {
  const rp_train_opts *o = &t->o;
  t->cfg = (rp_gpt_config){.L = o->layers, .C = o->channels, .NH = o->heads, .T = model_T,
                           .V = o->vocab, .Vp = rp_pad_vocab(o->vocab)};
  RP_TRY(rp_gpt_config_validate(&t->cfg));
  int p = t->grid.pp, v = o->vpp, S = p * v;
  t->all_stages = calloc(S, sizeof *t->all_stages);
  t->nchunks = v;
  t->chunks = calloc(v, sizeof *t->chunks);
  if (!t->all_stages || !t->chunks) return RP_ENOMEM;
  RP_TRY(rp_assign_stages(t->cfg.L, S, o->pp_layers, t->all_stages));
  /* which stages this rank holds is the schedule's stage map (the V puts the
   * first and the last on rank 0), so the schedule comes first */
  if (p > 1) RP_TRY(make_schedule(t));
  for (int c = 0; c < v; c++) {
    int stage = p > 1 ? rp_schedule_stage(t->sched, t->grid.pp_rank, c) : c;
    RP_TRY(rp_chunk_init_tp(&t->chunks[c], &t->cfg, &t->all_stages[stage], t->grid.tp,
                            t->grid.tp_rank));
    rp_chunk_init_weights(&t->chunks[c], (uint64_t)o->seed);
  }
  return RP_OK;
}

/* The pipeline: schedule, executor, and the pair of ranks sharing wte. */
static rp_status setup_pipeline(rp_trainer *t) {
  const rp_train_opts *o = &t->o;
  int p = t->grid.pp;
  rp_chunk **chunks = malloc(t->nchunks * sizeof *chunks);
  for (int c = 0; c < t->nchunks; c++) chunks[c] = &t->chunks[c];
  rp_pipeline_cfg pc = {.sched = t->sched, .comm = t->grid.pp_comm, .chunks = chunks,
                        .exec = &t->exec, .B = o->batch, .T = t->T_local};
  if (o->emulate.n) {  /* parsed by the options table, checked by rp_train_opts_check */
    t->emulate = (rp_costs){.tF = o->emulate.v[0] * 1e-3, .tB = o->emulate.v[1] * 1e-3,
                            .tW = o->emulate.v[2] * 1e-3};
    pc.emulate = &t->emulate;
  }
  rp_status s = rp_pipeline_create(&t->pipe, &pc);
  free(chunks);
  RP_TRY(s);
  /* the ranks holding the first stage (embedding) or the last (head): ranks
   * 0 and p-1, or rank 0 alone on the V, which sums its two copies itself */
  int r = t->grid.pp_rank, holds_wte = 0;
  for (int c = 0; c < t->nchunks; c++)
    holds_wte |= t->chunks[c].spec.has_embed || t->chunks[c].spec.has_head;
  (void)p;
  MPI_Comm_split(t->grid.pp_comm, holds_wte ? 0 : MPI_UNDEFINED, r, &t->tie_comm);
  return RP_OK;
}

static void on_grads_ready(void *ctx, const rp_chunk *m, int unit) {
  rp_dp_grads_ready(ctx, m, unit);
}

/* Gradient reduction over this stage's replicas and the optimizer state. */
static rp_status setup_data_parallel(rp_trainer *t) {
  const rp_train_opts *o = &t->o;
  rp_chunk **chunks = malloc(t->nchunks * sizeof *chunks);
  if (!chunks) return RP_ENOMEM;
  for (int c = 0; c < t->nchunks; c++) chunks[c] = &t->chunks[c];
  rp_dp_cfg dc = {.comm = t->grid.dpcp_comm, .tie_comm = t->tie_comm, .chunks = chunks,
                  .nchunks = t->nchunks, .microbatches = o->microbatches,
                  .bucket_floats = (size_t)(o->bucket_mb * 1048576.0 / sizeof(float)),
                  .zero = o->zero, .overlap = o->dp_overlap, .pool = t->pool,
                  .skip_replicated = t->grid.tp_rank != 0};
  rp_status s = rp_dp_create(&t->dp, &dc);
  free(chunks);
  RP_TRY(s);
  t->exec.grads_ready = on_grads_ready;
  t->exec.hook_ctx = t->dp;
  return RP_OK;
}

/* A weight whose pack is bigger (an LM head at GPT-2's vocabulary: 154 MiB)
 * is packed per call as without the cache: its pack would double a large
 * allocation to save a pass that is small beside its GEMM. */
#define WCACHE_MAX_ENTRY_BYTES ((size_t)16 << 20)

/* The rank-local attention kernel. A bf16 run's flash products go to bf16
 * (vdpbf16ps) too with --bf16-attention on, or auto where they pay
 * (rp_flash_bf16_pays); the kernels decide per call whether the ISA ceiling
 * lets them (rp_flash_bf16_active). */
static rp_status setup_attention(rp_trainer *t) {
  const rp_train_opts *o = &t->o;
  t->flash_cfg = (rp_flash_config){0};
  t->exec.attn = rp_attn_of_kind(o->attention);
  const int bf16_products = o->bf16_attention == RP_BF16_ATTN_ON ||
                            (o->bf16_attention == RP_BF16_ATTN_AUTO && t->bf16_attn_pays);
  if (o->attention == RP_ATTN_FLASH && o->precision == RP_PRECISION_BF16 && bf16_products) {
    t->flash_cfg.bf16 = 1;
    RP_TRY(rp_attn_flash_with(&t->flash_attn, &t->flash_cfg));
    t->exec.attn = &t->flash_attn;
  }
  t->local_attn = t->exec.attn;
  return RP_OK;
}

static rp_status setup_compute(rp_trainer *t) {
  const rp_train_opts *o = &t->o;
  int threads = o->threads > 0 ? o->threads : rp_default_threads();
  RP_TRY(rp_pool_create(&t->pool, threads, o->pin));
  RP_TRY(rp_gemm_apply_choice(t->pool, (rp_gemm_choice)o->gemm));
  /* the packs are worth keeping only when a step uses a weight twice */
  if (o->weight_cache && rp_trainer_packs_weights(t) &&
      (o->microbatches > 1 || o->recompute != RP_RECOMPUTE_NONE))
    RP_TRY(rp_sgemm_wcache_create(&t->wcache, WCACHE_MAX_ENTRY_BYTES));
  t->exec.pool = t->pool;
  RP_TRY(setup_attention(t));
  if (t->grid.tp > 1) {
    RP_TRY(rp_tp_create(&t->tp, t->grid.tp_comm, o->sp && o->tp_overlap));
    t->exec.tp = rp_tp_ops_of(t->tp);
  }
  if (t->grid.cp > 1) {
    rp_cp_layout layout = t->cp_layout;
    if (o->cp_impl == RP_CP_ULYSSES)  /* on this tensor-parallel rank's heads */
      RP_TRY(rp_cp_ulysses_create(&t->cp_attn, t->grid.cp_comm, layout, o->seq,
                                  o->heads / t->grid.tp));
    else
      RP_TRY(rp_cp_ring_create(&t->cp_attn, t->grid.cp_comm, layout, o->seq, o->cp_overlap));
    RP_TRY(rp_cp_set_flash(t->cp_attn, &t->flash_cfg));
    t->exec.attn = t->cp_attn;
  }
  int B = o->batch, T = t->T_local;
  rp_recompute rc = o->recompute;
  for (int c = 0; c < t->nchunks; c++) {
    RP_TRY(rp_chunk_set_sp(&t->chunks[c], o->sp, B, T));  /* sizes the layout: first */
    RP_TRY(rp_chunk_set_recompute(&t->chunks[c], rc, t->exec.attn, B, T));
  }
  if (o->precision == RP_PRECISION_BF16) {
    rp_chunk *list[RP_BF16_MAX_CHUNKS];
    for (int c = 0; c < t->nchunks && c < RP_BF16_MAX_CHUNKS; c++) list[c] = &t->chunks[c];
    RP_TRY(rp_bf16_ctx_init(&t->bf16, list, t->nchunks, B, T));
    t->exec.bf16 = &t->bf16;
  }
  if (t->grid.pp > 1) {
    RP_TRY(setup_pipeline(t));
  } else {
    rp_chunk *m = &t->chunks[0];
    t->acts_bytes = rp_acts_bytes(m, t->exec.attn, B, T);
    t->acts_mem = rp_alloc(t->acts_bytes, RP_MEM_ACTS);
    t->layer_views = calloc(t->cfg.L, sizeof *t->layer_views);
    if (!t->acts_mem || !t->layer_views) return RP_ENOMEM;
    rp_acts_bind(&t->acts, t->layer_views, m, t->exec.attn, t->acts_mem, B, T);
    RP_TRY(rp_grad_ws_init(&t->ws, m, B, T));
    t->dlnf_extra = rp_alloc((size_t)B * T * t->cfg.C * sizeof(float), RP_MEM_WORKSPACE);
    if (!t->dlnf_extra) return RP_ENOMEM;
  }
  RP_TRY(setup_data_parallel(t));
  /* round-to-nearest bf16 copies are written by AdamW's own pass (rp_dp.h) */
  if (t->bf16.n && !o->bf16_stochastic) RP_TRY(rp_dp_set_bf16_copies(t->dp, t->bf16.base16));
  size_t n = (size_t)o->microbatches * B * T, full = (size_t)o->microbatches * B * o->seq;
  t->full_tokens = rp_alloc(full * sizeof(int32_t), RP_MEM_DATA);
  t->full_targets = rp_alloc(full * sizeof(int32_t), RP_MEM_DATA);
  t->batch_tokens = rp_alloc(n * sizeof(int32_t), RP_MEM_DATA);
  t->batch_targets = rp_alloc(n * sizeof(int32_t), RP_MEM_DATA);
  t->batch_pos = rp_alloc(n * sizeof(int32_t), RP_MEM_DATA);
  if (!t->batch_tokens || !t->batch_targets || !t->batch_pos || !t->full_tokens ||
      !t->full_targets)
    return RP_ENOMEM;
  if (o->pack) {  /* each micro-batch's documents; position ids come with each batch */
    t->docs = calloc((size_t)o->microbatches, sizeof *t->docs);
    if (!t->docs) return RP_ENOMEM;
    for (int mb = 0; mb < o->microbatches; mb++) RP_TRY(rp_docs_init(&t->docs[mb], B, o->seq));
  }
  /* Global position ids of this rank's rows: context-parallel shards keep them. */
  rp_cp_layout layout = t->cp_layout;
  for (int mb = 0; mb < o->microbatches; mb++)
    RP_TRY(rp_cp_positions(t->batch_pos + (size_t)mb * B * T, B, layout, o->seq, t->grid.cp,
                           t->grid.cp_rank));
  return RP_OK;
}

static rp_status setup_data(rp_trainer *t) {
  const rp_train_opts *o = &t->o;
  if (strcmp(o->data, "builtin") == 0) {
    snprintf(t->data_dir, sizeof t->data_dir, "%s/data", o->out);
    /* Every rank of a node would write the same files: rank 0 prepares, the
     * others wait. This is the first thing the run creates. */
    rp_status s = RP_OK;
    if (t->grid.world_rank == 0) s = make_dir(o->out);
    if (s == RP_OK && t->grid.world_rank == 0) s = rp_builtin_prepare(t->data_dir);
    RP_TRY(rp_grid_agree(t->grid.world, s));
  } else {
    snprintf(t->data_dir, sizeof t->data_dir, "%s", o->data);
  }
  int dp = t->grid.dp, r = t->grid.dp_rank;
  RP_TRY(rp_loader_open(&t->train, t->data_dir, "train", o->batch, o->seq, o->file_order,
                        (uint64_t)o->seed, r, dp));
  RP_TRY(rp_loader_open(&t->val, t->data_dir, "val", o->batch, o->seq, 1, (uint64_t)o->seed, r,
                        dp));
  RP_TRY(rp_loader_set_vocab(t->train, t->cfg.V));
  RP_TRY(rp_loader_set_vocab(t->val, t->cfg.V));
  if (!o->pack) return RP_OK;
  int align = o->pack_align ? o->pack_align
                            : o->cp > 1 && t->cp_place == RP_CP_PLACE_DOC_ZIGZAG ? 2 * o->cp : 1;
  RP_TRY(rp_loader_set_pack(t->train, o->eot, align));
  RP_TRY(rp_loader_set_pack(t->val, o->eot, align));
  if (t->grid.world_rank == 0 && !o->quiet)
    rp_info("--pack: %llu batches of %d x %d per epoch, %.1f%% padding per real token "
            "(documents start on a fresh row rather than being cut; aligned to %d)",
            (unsigned long long)rp_loader_num_windows(t->train), o->batch, o->seq,
            100.0 * rp_loader_pad_fraction(t->train), align);
  return RP_OK;
}

/* --resume auto: world rank 0 picks the checkpoint and tells the others, so
 * that every rank loads the same one. */
static void resolve_resume_auto(rp_trainer *t, char *note, size_t ncap) {
  note[0] = '\0';
  if (strcmp(t->o.resume, "auto") != 0) return;
  char path[RP_OPT_STRLEN];
  if (rp_mpi_world_rank() == 0) rp_resume_auto(t->o.out, path, sizeof path, note, ncap);
  MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
  snprintf(t->o.resume, sizeof t->o.resume, "%s", path);
}

/* Everything checked that can be checked before the run creates anything:
 * options, output paths, the checkpoint to resume (the data shards are
 * opened before --out is created). */
static rp_status check_before_creating(rp_trainer *t, int *changed, int *model_T) {
  const rp_train_opts *o = &t->o;
  if (o->init_from[0]) RP_TRY(rp_init_config_into_opts(o->init_from, &t->o, changed, model_T));
  RP_TRY(rp_train_opts_check(o));
  RP_TRY(rp_check_out_dir(o->out, "--out"));
  if (o->trace[0]) RP_TRY(rp_check_out_file(o->trace, "--trace"));
  if (o->resume[0]) {
    char *meta = NULL;
    rp_gpt_config fc;
    int step;
    rp_status s = rp_ckpt_read_meta(o->resume, &meta);
    if (s == RP_OK) s = rp_ckpt_read_config(meta, o->resume, &fc);
    if (s == RP_OK) s = rp_ckpt_read_counter(meta, o->resume, "step", &step);
    free(meta);
    RP_TRY(s);
  }
  return RP_OK;
}

/* Rank 0 removes what processes that died while saving left in --out. */
static void reclaim_stale(const rp_trainer *t) {
  if (t->grid.world_rank != 0) return;
  char list[1024];
  int n = rp_reclaim_stale(t->o.out, list, sizeof list);
  if (n > 0)
    printf("removed %d stale temporar%s of processes that died while writing to %s: %s\n", n,
           n == 1 ? "y" : "ies", t->o.out, list);
}


/* Model, compute and gradient reduction, and the --init-from weights: the
 * engine every job shares. */
static rp_status build_engine(rp_trainer *t, int model_T) {
  RP_TRY(rp_grid_agree(MPI_COMM_WORLD, setup_model(t, model_T)));
  if (t->o.precision == RP_PRECISION_BF16 && t->o.bf16_attention == RP_BF16_ATTN_AUTO) {
    /* every rank takes the same choice: a probe near the threshold on one
     * rank must not give a job two attention precisions */
    t->bf16_attn_pays = rp_flash_bf16_pays();
    MPI_Allreduce(MPI_IN_PLACE, &t->bf16_attn_pays, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  }
  RP_TRY(rp_grid_agree(MPI_COMM_WORLD, setup_compute(t)));
  for (int c = 0; c < t->nchunks && t->o.init_from[0]; c++)
    RP_TRY(rp_grid_agree(MPI_COMM_WORLD,
                         t->grid.tp > 1 ? rp_tp_load_whole(t, c, t->o.init_from, NULL, NULL)
                                        : rp_load_weights(&t->chunks[c], t->o.init_from)));
  return RP_OK;
}

/* The machine's fp32 multiply-add limit beside the sgemm peak: the widest
 * FMA the instruction-set ceiling allows, one core's probe times the threads. */
static void measure_fma_peak(rp_trainer *t) {
  const rp_isa lv = rp_isa_fp32_fma_level();
  t->fma_what = lv == RP_ISA_AVX512 ? "zmm FMA" : "ymm FMA";
  t->fma_peak = rp_isa_peak_gflops(lv) * 1e9 * rp_pool_size(t->pool);
}

/* The MFU denominator: the GEMM this run's matmuls go through (bf16's on AMX
 * would otherwise read as several times 100% of an fp32 peak), but for bf16
 * without AMX the fp32 GEMM where it runs these shapes faster: those kernels
 * widen to fp32 FMAs (or run vdpbf16ps, half the FMA's rate on Sapphire
 * Rapids), the machine can always run fp32, and against the slower bf16 peak
 * the step's fp32 parts made the default model's MFU read 102 % (bf16 under
 * RINGPIPE_ISA=avx2, before its avx2-fma kernel: the portable one, 125 GFLOP/s,
 * the fp32 flash faster). */
/* The model's shapes through the fp32 GEMM or (bf16) the bf16 one, operands
 * carved from the activation buffer, idle before and between steps. */
static double gemm_rate_in_acts(rp_trainer *t, int bf16, rp_gemm_shape_rate *per_shape) {
  return rp_gpt_gemm_peak(&t->cfg, t->o.batch, t->T_local, bf16, t->pool, t->acts_mem,
                          t->acts_mem ? t->acts_bytes : 0, per_shape);
}

static void measure_gemm_peak(rp_trainer *t) {
  const int bf16 = t->o.precision == RP_PRECISION_BF16;
  t->gemm_peak = gemm_rate_in_acts(t, bf16, NULL);
  t->gemm_peak_bf16 = bf16 ? t->gemm_peak : 0.0;
  if (bf16 && rp_bf16_kernel_active() != RP_BF16_KERNEL_AMX) {
    double f = gemm_rate_in_acts(t, 0, NULL);
    if (f > t->gemm_peak) t->gemm_peak = f;
  }
}

double rp_trainer_gemm_rate_now(rp_trainer *t, rp_gemm_shape_rate *per_shape) {
  return gemm_rate_in_acts(t, t->o.precision == RP_PRECISION_BF16, per_shape);
}

/* A fresh engine holding the run's options; nothing created yet. */
static void engine_reset(rp_trainer *t, const rp_train_opts *o) {
  memset(t, 0, sizeof *t);
  t->o = *o;
  t->tie_comm = MPI_COMM_NULL;
  rp_wait_set_timeout(o->comm_timeout);
}

rp_status rp_engine_init(rp_trainer *t, const rp_train_opts *o) {
  engine_reset(t, o);
  int model_T = o->seq, changed = 0;
  rp_status s = RP_OK;
  if (o->init_from[0]) s = rp_init_config_into_opts(o->init_from, &t->o, &changed, &model_T);
  if (s == RP_OK) s = rp_train_opts_check(&t->o);
  if (s == RP_OK && (o->pp != 1 || o->cp != 1 || o->tp != 1))
    s = rp_err(RP_EINVAL, "this job runs one pipeline stage and no context or tensor "
               "parallelism (--pp 1 --cp 1 --tp 1); data parallelism takes every rank");
  t->cp_layout = RP_CP_CONTIGUOUS;
  t->cp_place = RP_CP_PLACE_ROW;
  if (s == RP_OK) s = rp_grid_init(&t->grid, 1, 1);
  t->T_local = o->seq;
  RP_TRY(rp_grid_agree(MPI_COMM_WORLD, s));
  RP_TRY(build_engine(t, model_T));
  if (t->bf16.n) rp_bf16_ctx_refresh(&t->bf16, o->bf16_stochastic, (uint64_t)o->seed, t->pool);
  return RP_OK;
}

rp_status rp_trainer_init(rp_trainer *t, const rp_train_opts *o) {
  engine_reset(t, o);
  int model_T = o->seq, changed = 0;
  char note[RP_OPT_STRLEN + 160];
  resolve_resume_auto(t, note, sizeof note);
  rp_status s = check_before_creating(t, &changed, &model_T);
  if (s == RP_OK) s = rp_grid_init_tp(&t->grid, o->pp, o->cp, o->tp);
  /* one rank holds the whole sequence: contiguous whatever was asked */
  t->cp_layout = RP_CP_CONTIGUOUS;
  t->cp_place = RP_CP_PLACE_ROW;
  if (o->cp > 1) rp_cp_split_resolve(o->cp_layout, &t->cp_layout, &t->cp_place);
  if (s == RP_OK && o->cp > 1) {
    s = rp_cp_check(t->cp_layout, o->seq, o->cp);
    if (s == RP_OK && o->cp_impl == RP_CP_ULYSSES && o->heads % o->cp != 0)
      s = rp_err(RP_EINVAL, "--cp-impl ulysses needs --heads %d divisible by --cp %d; use "
                 "--cp-impl ring or a head count that --cp divides", o->heads, o->cp);
  }
  t->T_local = o->seq / o->cp;
  RP_TRY(rp_grid_agree(MPI_COMM_WORLD, s));
  if (note[0] && t->grid.world_rank == 0) printf("%s\n", note);
  if (changed && t->grid.world_rank == 0)
    printf("model shape taken from %s: L=%d C=%d NH=%d V=%d\n", o->init_from, t->o.layers,
           t->o.channels, t->o.heads, t->o.vocab);
  o = &t->o;
  RP_TRY(build_engine(t, model_T));
  RP_TRY(rp_grid_agree(MPI_COMM_WORLD, setup_data(t)));
  rp_rng_seed(&t->sample_rng, (uint64_t)o->seed ^ 0x5eedULL);
  if (o->resume[0]) RP_TRY(rp_grid_agree(MPI_COMM_WORLD, rp_trainer_resume(t, o->resume)));
  /* shards, weights and checkpoint are good: now --out may be created */
  if (strcmp(o->data, "builtin") != 0)
    RP_TRY(rp_grid_agree(MPI_COMM_WORLD, t->grid.world_rank == 0 ? make_dir(o->out) : RP_OK));
  reclaim_stale(t);
  if (t->bf16.n) rp_bf16_ctx_refresh(&t->bf16, o->bf16_stochastic, (uint64_t)o->seed, t->pool);
  if (o->measure_peak) {
    measure_gemm_peak(t);
    measure_fma_peak(t);
  }
  return RP_OK;
}

void rp_trainer_free(rp_trainer *t) {
  rp_stop_uninstall();
  if (t->train) rp_loader_close(t->train);
  if (t->val) rp_loader_close(t->val);
  rp_attn_destroy(t->cp_attn);
  if (t->tp) rp_tp_destroy(t->tp);
  rp_free(t->full_tokens);
  rp_free(t->full_targets);
  rp_free(t->batch_tokens);
  rp_free(t->batch_targets);
  rp_free(t->batch_pos);
  for (int mb = 0; t->docs && mb < t->o.microbatches; mb++) rp_docs_free(&t->docs[mb]);
  free(t->docs);
  rp_grad_ws_free(&t->ws);
  rp_free(t->dlnf_extra);
  rp_free(t->acts_mem);
  free(t->layer_views);
  if (t->pipe) rp_pipeline_destroy(t->pipe);
  if (t->sched) rp_schedule_free(t->sched);
  rp_post_validation_free(t);
  if (t->dp) rp_dp_destroy(t->dp);
  if (t->bf16.n) {
    rp_bf16_ctx_free(&t->bf16);
  }
  if (t->tie_comm != MPI_COMM_NULL) MPI_Comm_free(&t->tie_comm);
  for (int c = 0; c < t->nchunks && t->chunks; c++) {
    rp_chunk_free(&t->chunks[c]);
  }
  free(t->chunks);
  free(t->all_stages);
  rp_pool_set_wcache(t->pool, NULL);
  rp_sgemm_wcache_free(t->wcache);
  if (t->pool) rp_pool_destroy(t->pool);
  if (t->grid.world_size) rp_grid_free(&t->grid);
  memset(t, 0, sizeof *t);
}
