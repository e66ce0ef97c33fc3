/* Megatron sequence parallelism (Korthikanti et al. 2022) on top of tensor
 * parallelism: the tensors that tensor parallelism alone replicates -- the
 * residual stream, the LayerNorms and their statistics, the embedding output
 * -- are split into tp blocks of the micro-batch's N = B x T rows (rank r keeps
 * rows [r N/tp, (r+1) N/tp)), and the conjugate collectives replace the
 * all-reduces:
 *   forward:  LN on N/tp rows -> all-gather (N rows) -> column-parallel GEMM
 *             -> ... -> row-parallel GEMM (partial sums, N rows)
 *             -> reduce-scatter (N/tp rows) -> + bias + residual;
 *   backward: all-gather of the N/tp-row gradient before the row-parallel
 *             layer's backward, reduce-scatter of the column-parallel input
 *             gradient (N rows of partial sums) into the LayerNorm's rows.
 * An all-gather and a reduce-scatter move the bytes of the all-reduce they
 * replace. Only the N/tp-row LayerNorm output is kept; backward gathers it
 * again for the weight gradient, so no layer tensor holds N rows of C.
 * The LayerNorm weights see 1/tp of the rows on each rank: their gradients
 * are summed over tp (one all-reduce of 4C per layer, 2C for ln_f), in a
 * scratch so that micro-batches still accumulate. Biases of row-parallel
 * layers take their gradient from the gathered full-row gradient: the same on
 * every rank. */
#include <string.h>

#include "model_internal.h"
#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_prof.h"

/* sp_scratch: gathered input | partial output | gathered gradient (N x C
 * each), then the LayerNorm gradient sums (4 C). */
typedef struct {
  float *gath, *part, *dfull, *lnacc;
} sp_bufs;

static sp_bufs bufs_of(const rp_chunk *m, long N) {
  long NC = N * m->cfg.C;
  RP_CHECK(m->sp_scratch && (size_t)(3 * NC + 4L * m->cfg.C) <= m->sp_floats);
  float *s = m->sp_scratch;
  return (sp_bufs){s, s + NC, s + 2 * NC, s + 3 * NC};
}

rp_status rp_chunk_set_sp(rp_chunk *m, int on, int B, int T) {
  rp_free(m->sp_scratch);
  m->sp_scratch = NULL;
  m->sp_floats = 0;
  m->sp = 0;
  if (!on) return RP_OK;
  long N = (long)B * T;
  if (m->tp < 2 || N % m->tp != 0)
    return rp_err(RP_EINVAL, "sequence parallelism needs --tp 2 or more dividing the %ld rows "
                  "of a micro-batch (tp %d)", N, m->tp);
  m->sp_floats = 3 * (size_t)N * m->cfg.C + 4 * (size_t)m->cfg.C;
  m->sp_scratch = rp_alloc(m->sp_floats * sizeof(float), RP_MEM_WORKSPACE);
  if (!m->sp_scratch) return rp_err(RP_ENOMEM, "out of memory for the sequence-parallel scratch");
  m->sp = 1;
  return RP_OK;
}

static void gather_rows(const rp_exec *x, float *full, const float *mine, long nmine) {
  x->tp->all_gather(x->tp, full, mine, nmine);
}

static void scatter_rows(const rp_exec *x, float *mine, const float *full, long nmine) {
  x->tp->reduce_scatter(x->tp, mine, full, nmine);
}

/* rows rows of out[., OC] = inp @ w^T + bias in pieces of about a quarter,
 * letting the ring step in flight advance between them (the main thread is
 * the one that makes MPI calls; a row piece of a GEMM is the same arithmetic
 * per row as the whole GEMM). */
static void matmul_rows_progress(float *out, const float *inp, const float *w,
                                 const float *bias, int rows, int IC, int OC, int in_flight,
                                 const rp_exec *x) {
  int piece = in_flight ? (rows + 3) / 4 : rows;
  if (piece < 16) piece = 16;
  for (int r0 = 0; r0 < rows; r0 += piece) {
    int n = rows - r0 < piece ? rows - r0 : piece;
    RP_PROF(RP_PROF_FWD_MATMUL, rp_mm_forward(out + (long)r0 * OC, inp + (long)r0 * IC, w, bias,
                                              n, IC, OC, x));
    if (in_flight) x->tp->ring_progress(x->tp);
  }
}

/* The ring all-gather of mine (this rank's Nr rows of C) into full (N rows):
 * step k passes on block (me - k), which arrived at step k - 1, while
 * on_block(ctx, blk, in_flight) computes with the block at hand; the last
 * block arrives with nothing more in flight. */
typedef void (*block_fn)(void *ctx, int blk, int in_flight);

static void ring_gather(const rp_chunk *m, const rp_exec *x, float *full, const float *mine,
                        int N, block_fn on_block, void *ctx) {
  int P = m->tp, me = m->tp_rank;
  size_t NrC = (size_t)(N / P) * m->cfg.C;
  memcpy(full + me * NrC, mine, NrC * sizeof(float));
  for (int k = 0; k < P; k++) {
    int blk = ((me - k) % P + P) % P, next = ((me - k - 1) % P + P) % P, more = k < P - 1;
    if (more) x->tp->ring_begin(x->tp, full + blk * NrC, full + next * NrC, (long)NrC, k);
    on_block(ctx, blk, more);
    if (more) x->tp->ring_end(x->tp);
  }
}

typedef struct {
  const rp_exec *x;
  float *out, *dinp, *gw;
  const float *in, *w, *bias;
  int Nr, IC, OC;
} block_job;

static void forward_block(void *ctx, int blk, int in_flight) {
  block_job *j = ctx;
  size_t r0 = (size_t)blk * j->Nr;
  matmul_rows_progress(j->out + r0 * j->OC, j->in + r0 * j->IC, j->w, j->bias, j->Nr, j->IC,
                       j->OC, in_flight, j->x);
}

/* out[N, OC] = all-gather(ln: this rank's Nr rows) @ w^T + bias: the
 * column-parallel GEMM after the gather. With overlap (the ring in the
 * collectives table) each ring step's transfer runs while this rank
 * multiplies the block it already holds; without, one all-gather and then
 * the GEMM. */
static void gather_matmul(const rp_chunk *m, float *out, const float *ln, const float *w,
                          const float *bias, int N, int OC, const rp_exec *x) {
  int C = m->cfg.C, Nr = N / m->tp;
  sp_bufs b = bufs_of(m, N);
  if (!x->tp->ring_begin) {
    gather_rows(x, b.gath, ln, (long)Nr * C);
    RP_PROF(RP_PROF_FWD_MATMUL, rp_mm_forward(out, b.gath, w, bias, N, C, OC, x));
    return;
  }
  block_job j = {.x = x, .out = out, .in = b.gath, .w = w, .bias = bias, .Nr = Nr, .IC = C,
                 .OC = OC};
  ring_gather(m, x, b.gath, ln, N, forward_block, &j);
}

/* The row-parallel layer's backward, block by block as the gradient's rows
 * arrive: dinp rows written, this rank's weight gradient accumulated, in row
 * pieces with the ring progressed between them. */
static void backward_block(void *ctx, int blk, int in_flight) {
  block_job *j = ctx;
  int piece = in_flight ? (j->Nr + 3) / 4 : j->Nr;
  if (piece < 16) piece = 16;
  for (int r = 0; r < j->Nr; r += piece) {
    int n = j->Nr - r < piece ? j->Nr - r : piece;
    size_t r0 = (size_t)blk * j->Nr + r;
    RP_PROF(RP_PROF_BWD_MATMUL,
            rp_mm_backward_set(j->dinp + r0 * j->IC, j->gw, NULL, j->out + r0 * j->OC,
                               j->in + r0 * j->IC, j->w, n, j->IC, j->OC, j->x));
    if (in_flight) j->x->tp->ring_progress(j->x->tp);
  }
}

/* Backward of a row-parallel layer (out = inp @ w^T, inp this rank's IC
 * features of N rows): the output gradient's rows (dres: this rank's Nr) are
 * all-gathered into b.dfull, then dinp[N, IC] is written and gw, gb
 * accumulated. With overlap the gather is the ring and each block's GEMMs run
 * as it arrives; the replicated bias's gradient is then one pass over the
 * whole gathered gradient, in the same order on every rank, so that the bias
 * stays identical across tp. */
static void gather_row_parallel_back(const rp_chunk *m, float *dinp, float *gw, float *gb,
                                     const float *dres, const float *inp, const float *w, int N,
                                     int IC, const rp_exec *x) {
  int C = m->cfg.C, Nr = N / m->tp;
  sp_bufs b = bufs_of(m, N);
  if (!x->tp->ring_begin) {
    gather_rows(x, b.dfull, dres, (long)Nr * C);
    RP_PROF(RP_PROF_BWD_MATMUL, rp_mm_backward_set(dinp, gw, gb, b.dfull, inp, w, N, IC, C, x));
    return;
  }
  block_job j = {.x = x, .out = b.dfull, .dinp = dinp, .gw = gw, .in = inp, .w = w, .Nr = Nr,
                 .IC = IC, .OC = C};
  ring_gather(m, x, b.dfull, dres, N, backward_block, &j);
  RP_PROF(RP_PROF_BWD_MATMUL, rp_matmul_backward(NULL, NULL, gb, b.dfull, inp, w, N, IC, C,
                                                 x->pool));
}

/* out[Nr, C] = sum over ranks of row block `me` of inp @ w^T, as a ring
 * reduce-scatter overlapped with the GEMM: the accumulator of block j travels
 * around the ring gathering each rank's partial product of it, and while one
 * accumulator is in flight this rank multiplies its rows of the next block.
 * Step k receives the sum so far of block (me - k - 2) mod P; after P - 1
 * steps the block that arrives is this rank's own, complete but for its own
 * partial. (The sum's order differs from MPI_Reduce_scatter's: not bitwise.) */
static void matmul_reduce_scatter(const rp_chunk *m, float *out, const float *inp,
                                  const float *w, int N, int IC, const rp_exec *x) {
  int C = m->cfg.C, P = m->tp, me = m->tp_rank, Nr = N / P;
  size_t NrC = (size_t)Nr * C;
  sp_bufs b = bufs_of(m, N);
  float *send = b.dfull, *recv = b.dfull + NrC, *mine = b.part;
  int first = ((me - 1) % P + P) % P;
  matmul_rows_progress(send, inp + (size_t)first * Nr * IC, w, NULL, Nr, IC, C, 0, x);
  for (int k = 0; k < P - 1; k++) {
    int blk = ((me - k - 2) % P + P) % P;
    x->tp->ring_begin(x->tp, send, recv, (long)NrC, k);
    matmul_rows_progress(mine, inp + (size_t)blk * Nr * IC, w, NULL, Nr, IC, C, 1, x);
    x->tp->ring_end(x->tp);
    float *acc = k == P - 2 ? out : send;  /* the last one is this rank's block */
    for (size_t i = 0; i < NrC; i++) acc[i] = recv[i] + mine[i];
  }
}

/* out[Nr, C] = reduce-scatter of the partial product + bias + resid. */
static void row_parallel_out(const rp_chunk *m, float *out, const float *inp, const float *w,
                             const float *bias, const float *resid, int N, int IC,
                             const rp_exec *x) {
  int C = m->cfg.C, Nr = N / m->tp;
  sp_bufs b = bufs_of(m, N);
  if (x->tp->ring_begin) {
    matmul_reduce_scatter(m, out, inp, w, N, IC, x);
  } else {
    RP_PROF(RP_PROF_FWD_MATMUL, rp_mm_forward(b.part, inp, w, NULL, N, IC, C, x));
    scatter_rows(x, out, b.part, (long)Nr * C);
  }
  for (long i = 0; i < Nr; i++)
    for (int j = 0; j < C; j++) out[i * C + j] += bias[j] + resid[i * C + j];
}

void rp_sp_layer_forward(const rp_chunk *m, const rp_layer_params *p, rp_layer_acts *l,
                         const float *in, const rp_attn_batch *ab, const rp_exec *x) {
  int N = ab->B * ab->T, Nr = N / m->tp, C = m->cfg.C, Ct = rp_tp_width(m);
  rp_pool *pool = x->pool;
  RP_PROF(RP_PROF_FWD_LAYERNORM, rp_layernorm_forward(l->ln1, l->ln1_mean, l->ln1_rstd, in,
                                                      p->ln1w, p->ln1b, Nr, C, pool));
  gather_matmul(m, l->qkv, l->ln1, p->qkvw, p->qkvb, N, 3 * Ct, x);
  rp_attn_run_forward(x, ab, l);
  row_parallel_out(m, l->res2, l->atty, p->attprojw, p->attprojb, in, N, Ct, x);
  RP_PROF(RP_PROF_FWD_LAYERNORM, rp_layernorm_forward(l->ln2, l->ln2_mean, l->ln2_rstd,
                                                      l->res2, p->ln2w, p->ln2b, Nr, C, pool));
  gather_matmul(m, l->fch, l->ln2, p->fcw, p->fcb, N, 4 * Ct, x);
  RP_PROF(RP_PROF_FWD_GELU, rp_gelu_forward(l->fch_gelu, l->fch, 4L * N * Ct, pool));
  row_parallel_out(m, l->res3, l->fch_gelu, p->fcprojw, p->fcprojb, l->res2, N, 4 * Ct, x);
}

/* The column-parallel layer's input gradient: partial sums over N rows into
 * b.part, reduce-scattered into dln (Nr rows); its weight gradient against
 * the re-gathered LayerNorm output ln (Nr rows). */
static void column_parallel_back(const rp_chunk *m, float *dln, float *gw, float *gb,
                                 const float *dout, const float *ln, const float *w, int N,
                                 int OC, const rp_exec *x) {
  int C = m->cfg.C, Nr = N / m->tp;
  sp_bufs b = bufs_of(m, N);
  gather_rows(x, b.gath, ln, (long)Nr * C);
  RP_PROF(RP_PROF_BWD_MATMUL, rp_mm_backward_set(b.part, gw, gb, dout, b.gath, w, N, C, OC, x));
  scatter_rows(x, dln, b.part, (long)Nr * C);
}

/* LayerNorm gradients summed over tp into g (lnacc holds n floats of this
 * rank's rows' sums, in the order of dst). */
static void add_ln_grads(const rp_chunk *m, const rp_exec *x, float *lnacc, float *const *dst,
                         int k) {
  int C = m->cfg.C;
  x->tp->all_reduce(x->tp, lnacc, (long)k * C, RP_TP_SUM);
  for (int i = 0; i < k; i++)
    for (int j = 0; j < C; j++) dst[i][j] += lnacc[i * C + j];
}

void rp_sp_layer_backward(const rp_chunk *m, const rp_layer_params *p, rp_layer_params *g,
                          const rp_layer_acts *l, const float *in, rp_grad_ws *w,
                          const rp_attn_batch *ab, const rp_exec *x) {
  int N = ab->B * ab->T, Nr = N / m->tp, C = m->cfg.C, Ct = rp_tp_width(m);
  long NCt = (long)N * Ct;
  rp_pool *pool = x->pool;
  sp_bufs b = bufs_of(m, N);
  memset(b.lnacc, 0, 4 * (size_t)C * sizeof(float));
  /* MLP branch: w->dres is d(res3) on this rank's rows */
  gather_row_parallel_back(m, w->dfch_gelu, g->fcprojw, g->fcprojb, w->dres, l->fch_gelu,
                           p->fcprojw, N, 4 * Ct, x);
  RP_PROF(RP_PROF_BWD_GELU, rp_gelu_backward_set(w->dfch, l->fch, w->dfch_gelu, 4 * NCt, pool));
  column_parallel_back(m, w->dln, g->fcw, g->fcb, w->dfch, l->ln2, p->fcw, N, 4 * Ct, x);
  RP_PROF(RP_PROF_BWD_LAYERNORM,
          rp_layernorm_backward(w->dres, b.lnacc + 2 * C, b.lnacc + 3 * C, w->dln, l->res2,
                                p->ln2w, l->ln2_mean, l->ln2_rstd, Nr, C, pool));
  /* attention branch: w->dres is d(res2) */
  gather_row_parallel_back(m, w->dbuf, g->attprojw, g->attprojb, w->dres, l->atty, p->attprojw,
                           N, Ct, x);
  RP_PROF(RP_PROF_BWD_SCRATCH, rp_zero(w->dqkv, 3 * NCt, pool));
  rp_attn_run_backward(x, ab, w->dqkv, w->dbuf, l);
  column_parallel_back(m, w->dln, g->qkvw, g->qkvb, w->dqkv, l->ln1, p->qkvw, N, 3 * Ct, x);
  RP_PROF(RP_PROF_BWD_LAYERNORM,
          rp_layernorm_backward(w->dres, b.lnacc, b.lnacc + C, w->dln, in, p->ln1w, l->ln1_mean,
                                l->ln1_rstd, Nr, C, pool));
  float *const dst[4] = {g->ln1w, g->ln1b, g->ln2w, g->ln2b};
  add_ln_grads(m, x, b.lnacc, dst, 4);
}

/* Vocabulary-parallel embedding of all N rows (partial), reduce-scattered to
 * this rank's rows. */
void rp_sp_embed_forward(const rp_chunk *m, rp_acts *a, const rp_exec *x) {
  int N = a->B * a->T, C = m->cfg.C;
  sp_bufs b = bufs_of(m, N);
  rp_tp_embed_partial(m, a, b.part);
  scatter_rows(x, a->input, b.part, (long)(N / m->tp) * C);
}

void rp_sp_embed_backward(rp_chunk *m, const float *dres, const rp_acts *a, const rp_exec *x) {
  int N = a->B * a->T, C = m->cfg.C;
  sp_bufs b = bufs_of(m, N);
  gather_rows(x, b.dfull, dres, (long)(N / m->tp) * C);
  rp_tp_embed_backward(m, b.dfull, a);
}

/* ln_f on this rank's rows, gathered for the vocabulary-parallel LM head. */
void rp_sp_head_logits(const rp_chunk *m, rp_acts *a, const rp_exec *x) {
  int N = a->B * a->T, Nr = N / m->tp, C = m->cfg.C;
  RP_PROF(RP_PROF_FWD_LAYERNORM, rp_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd,
                                                      a->output, m->p.lnfw, m->p.lnfb, Nr, C,
                                                      x->pool));
  gather_matmul(m, a->logits, a->lnf, m->p.wte, NULL, N, rp_tp_vocab(m), x);
}

/* From dlogits (in a->logits): wte's gradient and dlnf reduce-scattered to
 * this rank's rows, then ln_f's backward into w->dres (written). */
void rp_sp_head_backward(rp_chunk *m, rp_acts *a, rp_grad_ws *w, const rp_exec *x) {
  int N = a->B * a->T, Nr = N / m->tp, C = m->cfg.C;
  sp_bufs b = bufs_of(m, N);
  column_parallel_back(m, w->dln, m->g.wte, NULL, a->logits, a->lnf, m->p.wte, N,
                       rp_tp_vocab(m), x);
  memset(b.lnacc, 0, 2 * (size_t)C * sizeof(float));
  RP_PROF(RP_PROF_BWD_SCRATCH, rp_zero(w->dres, (long)Nr * C, x->pool));
  RP_PROF(RP_PROF_BWD_LAYERNORM,
          rp_layernorm_backward(w->dres, b.lnacc, b.lnacc + C, w->dln, a->output, m->p.lnfw,
                                a->lnf_mean, a->lnf_rstd, Nr, C, x->pool));
  float *const dst[2] = {m->g.lnfw, m->g.lnfb};
  add_ln_grads(m, x, b.lnacc, dst, 2);
}
