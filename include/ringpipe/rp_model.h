/* GPT-2 model in fp32, split into chunks so that a pipeline stage, a virtual stage
 * or the whole model are the same object.
 *
 * A chunk holds a contiguous range of transformer layers and optionally the
 * embeddings (first stage) and/or the final LayerNorm + tied LM head + loss (last
 * stage). Its parameters live in ONE contiguous buffer with named views (llm.c
 * style), laid out layer-major so that a chunk's buffer is a slice of the
 * whole model's and data-parallel buckets map to layers. When one chunk has both
 * embed and head the token embedding is shared (tied); when they are on different
 * chunks each holds a copy of wte and the pipeline sums their gradients.
 *
 * The model knows nothing of MPI. Attention is a backend (local reference, local
 * flash, ring, Ulysses) handed in through rp_exec.
 *
 * Shapes: B batch, T tokens of this rank's sequence shard, C channels, NH heads,
 * L layers, V vocab, Vp padded vocab, N = B*T rows. */
#ifndef RP_MODEL_H
#define RP_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "rp_base.h"
#include "rp_pool.h"

typedef struct {
  int L;      /* layers */
  int C;      /* channels */
  int NH;     /* heads */
  int T;      /* max sequence length (rows of wpe) */
  int V;      /* vocabulary */
  int Vp;     /* padded vocabulary (multiple of 64 for GEMM speed, >= V) */
} rp_gpt_config;

/* Checks divisibility and ranges; message names the value and the fix. */
rp_status rp_gpt_config_validate(const rp_gpt_config *cfg);
int rp_pad_vocab(int V);                 /* V rounded up to a multiple of 64 */
/* Parameter count of the whole model (wte counted once, padded rows excluded). */
size_t rp_gpt_num_params(const rp_gpt_config *cfg);

typedef struct {
  int first_layer, num_layers;   /* global layer range [first, first+num) */
  int has_embed, has_head;
} rp_stage_spec;

/* One named tensor of a chunk: GPT-2 (Hugging Face) name, shape as stored here
 * (llm.c orientation), offset in the chunk buffer, and whether AdamW decays it. */
typedef struct {
  char name[48];
  int ndim;
  int shape[2];
  size_t offset, numel;
  int decay;          /* 1 for matrices (weights), 0 for biases, LN, embeddings' none */
  int hf_transpose;   /* HF Conv1D stores (in, out): transpose when exporting */
  int layer;          /* global layer index, -1 for embeddings / head */
  int is_wte;         /* the (tied) token embedding */
  /* Tensor parallelism: how this chunk's tensor is a slice of the full one.
   * RP_TP_REPLICATED: the full tensor on every tp rank; RP_TP_ROWS: rank r
   * holds rows [r R/t, (r+1) R/t) of each of tp_blocks equal row blocks (3 for
   * c_attn's q|k|v, 1 else); RP_TP_COLS: columns [r Cc/t, (r+1) Cc/t). */
  int tp_split;
  int tp_blocks;
  int full_shape[2];  /* the whole tensor's shape (shape[] is this rank's slice) */
} rp_tensor;
enum { RP_TP_REPLICATED = 0, RP_TP_ROWS = 1, RP_TP_COLS = 2 };

typedef struct {
  float *ln1w, *ln1b;         /* C */
  float *qkvw, *qkvb;         /* 3C x C, 3C */
  float *attprojw, *attprojb; /* C x C, C */
  float *ln2w, *ln2b;         /* C */
  float *fcw, *fcb;           /* 4C x C, 4C */
  float *fcprojw, *fcprojb;   /* C x 4C, C */
} rp_layer_params;

typedef struct {
  float *wte;                 /* Vp x C (embed and/or head) */
  float *wpe;                 /* T x C (embed) */
  rp_layer_params *layer;     /* num_layers entries */
  float *lnfw, *lnfb;         /* C (head) */
} rp_param_views;

/* Activation recomputation: what a layer keeps for backward.
 *   NONE       everything (16 N C + 4 N floats + the attention's saved state);
 *   SELECTIVE  all but the attention's saved state when it is the O(T^2)
 *              probabilities, and the GELU output: both recomputed in backward;
 *   FULL       only the layer output (the next layer's input): the whole layer
 *              is recomputed in backward.
 * Recomputation reruns the same deterministic kernels on the same inputs, so the
 * gradients are bitwise those of NONE. The recomputed tensors live in one
 * shared per-chunk scratch layer. Not combinable with the I/W split. */
typedef enum { RP_RECOMPUTE_NONE = 0, RP_RECOMPUTE_SELECTIVE, RP_RECOMPUTE_FULL } rp_recompute;
const char *rp_recompute_name(rp_recompute mode);  /* "none", "selective", "full" */
/* Matmul precision of a run (--precision fp32|bf16, in that order). */
typedef enum { RP_PRECISION_FP32 = 0, RP_PRECISION_BF16 = 1 } rp_precision;
/* Whether a bf16 run's flash products run in bf16 too (--bf16-attention
 * auto|on|off, in that order): auto where rp_flash_bf16_pays. */
typedef enum { RP_BF16_ATTN_AUTO = 0, RP_BF16_ATTN_ON, RP_BF16_ATTN_OFF } rp_bf16_attn;
/* Which local attention kernel (--attention naive|flash, in that order). */
typedef enum { RP_ATTN_NAIVE = 0, RP_ATTN_FLASH = 1 } rp_attn_kind;

typedef struct {
  rp_gpt_config cfg;
  rp_stage_spec spec;
  rp_recompute recompute;     /* see rp_chunk_set_recompute */
  void *rc_scratch;           /* RP_MEM_ACTS: one layer's recomputed tensors */
  size_t rc_bytes;
  size_t num_params;          /* floats in this chunk's buffer */
  float *params, *grads;      /* one buffer each (RP_MEM_PARAMS / RP_MEM_GRADS) */
  rp_param_views p, g;        /* named views into params / grads */
  rp_tensor *tensors;
  int num_tensors;
  /* Tensor parallelism (Megatron): this chunk is tp rank tp_rank's shard of
   * its layers (tp = 1: the whole thing). c_attn and c_fc are column-parallel
   * (NH/tp heads, 4C/tp hidden features), attn/mlp c_proj row-parallel (C/tp
   * or 4C/tp input features; their biases replicated and added once), wte
   * vocabulary-parallel (Vp/tp rows); LayerNorms, wpe and biases of c_proj are
   * replicated. */
  int tp, tp_rank;
  /* Megatron sequence parallelism (rp_chunk_set_sp): LayerNorms, residual
   * adds, the embedding output and the layers' inputs/outputs live on this
   * rank's 1/tp of the micro-batch's B x T rows (contiguous block tp_rank);
   * all-gathered before each column-parallel block, reduce-scattered after
   * each row-parallel one. sp_scratch: the gathered input, the partial output
   * and the gathered gradient (N x C each) and the LayerNorm gradients' sum. */
  int sp;
  float *sp_scratch;
  size_t sp_floats;
} rp_chunk;

/* Validates cfg+spec, allocates and lays out params and grads (zeroed). */
rp_status rp_chunk_init(rp_chunk *m, const rp_gpt_config *cfg, const rp_stage_spec *spec);
/* The same for tp rank tp_rank of tp: only this rank's shards are allocated
 * (parameter memory 1/tp of the sharded tensors). NH % tp and Vp % tp must be 0. */
rp_status rp_chunk_init_tp(rp_chunk *m, const rp_gpt_config *cfg, const rp_stage_spec *spec,
                           int tp, int tp_rank);
/* Copies between a whole chunk's buffer (full: a tp = 1 chunk of the same
 * stage) and a tp rank's shard of it (local), tensor by tensor. */
void rp_chunk_shard_from(const rp_chunk *local, float *local_buf, const rp_chunk *full,
                         const float *full_buf);
void rp_chunk_unshard_into(const rp_chunk *local, const float *local_buf, const rp_chunk *full,
                           float *full_buf);
/* Checks that tp divides the model (NH % tp, Vp % tp): the message names the fix. */
rp_status rp_gpt_config_check_tp(const rp_gpt_config *cfg, int tp);
void rp_chunk_free(rp_chunk *m);
/* GPT-2 init (normal 0.02, residual projections 0.02/sqrt(2L), biases 0, LN 1/0).
 * Each tensor draws from its own stream seeded by (seed, global tensor id) so a
 * chunk of layers gets exactly the values the whole model would. */
void rp_chunk_init_weights(rp_chunk *m, uint64_t seed);
void rp_chunk_zero_grads(rp_chunk *m);
/* Chooses the recomputation mode before activations are sized (rp_acts_bytes and
 * rp_acts_bind follow it) and allocates the shared scratch for B x T rows. */
struct rp_attn_backend;
/* Layers of each of the S = pp * vpp stages: `spec` is "3,3,2" (S numbers summing
 * to L) or "" for an even split (the first L % S stages get one more). Stage 0
 * has the embeddings, stage S-1 the head (stages.c). */
rp_status rp_assign_stages(int L, int S, const char *spec, rp_stage_spec *out);
rp_status rp_chunk_set_recompute(rp_chunk *m, rp_recompute mode,
                                 const struct rp_attn_backend *attn, int B, int T);
const rp_tensor *rp_chunk_find(const rp_chunk *m, const char *name);
/* Sequence parallelism on (before activations are sized): needs tp > 1 and
 * B x T rows divisible by tp; allocates the chunk's scratch for B x T rows. */
rp_status rp_chunk_set_sp(rp_chunk *m, int on, int B, int T);

/* ---- attention backends: the seam where context parallelism plugs in.
 *
 * A backend is immutable once created (one may serve several threads); what
 * varies per micro-batch lives in the caller's rp_attn_batch, filled by
 * prepare: the shape checks happen there once per batch (not per layer call),
 * and there the batch's document layout (rp_docs.h, NULL for one causal
 * sequence per row) is handed over. forward and backward then take the
 * prepared batch and return a status. destroy frees a created backend (NULL
 * for the shared static ones); rp_attn_destroy calls it. */
struct rp_docs_s;
typedef struct rp_attn_backend rp_attn_backend;
typedef struct {
  const rp_attn_backend *backend;  /* who prepared it (NULL: not prepared) */
  int B, T, C, NH;                 /* this rank's rows: T is the local sequence */
  const struct rp_docs_s *docs;    /* borrowed, whole rows (B x T*cp); NULL: causal rows */
} rp_attn_batch;
struct rp_attn_backend {
  const char *name;
  /* floats of saved state per layer per micro-batch (probs for the reference,
   * log-sum-exp for flash) */
  size_t (*saved_floats)(const rp_attn_backend *a, int B, int T, int C, int NH);
  /* checks the shape (and document layout) and fills *batch */
  rp_status (*prepare)(const rp_attn_backend *a, rp_attn_batch *batch, int B, int T, int C,
                       int NH, const struct rp_docs_s *docs);
  /* out[B,T,C] from qkv[B,T,3C]; causal (within documents) */
  rp_status (*forward)(const rp_attn_backend *a, const rp_attn_batch *batch, float *out,
                       float *saved, const float *qkv, rp_pool *pool);
  /* dqkv[B,T,3C] += gradient, given dout[B,T,C] and forward out + saved */
  rp_status (*backward)(const rp_attn_backend *a, const rp_attn_batch *batch, float *dqkv,
                        const float *dout, const float *qkv, const float *out,
                        const float *saved, rp_pool *pool);
  void (*destroy)(rp_attn_backend *a);
  void *ctx;
};
/* The local O(T^2) reference backend (always available; the oracle). */
const rp_attn_backend *rp_attn_reference(void);
/* The reference or the flash backend (attn_flash.c). */
const rp_attn_backend *rp_attn_of_kind(rp_attn_kind kind);
/* a->prepare; RP_EINVAL (and batch unprepared) on a bad shape or layout. */
rp_status rp_attn_prepare(const rp_attn_backend *a, rp_attn_batch *batch, int B, int T, int C,
                          int NH, const struct rp_docs_s *docs);
/* Whether batch was prepared by a for B x T rows (and these docs). */
int rp_attn_batch_ready(const rp_attn_batch *batch, const rp_attn_backend *a, int B, int T,
                        const struct rp_docs_s *docs);
/* The local backends' shared shape check (B, T >= 1, NH divides C, docs B x T). */
rp_status rp_attn_check_local(rp_attn_batch *batch, const rp_attn_backend *a, int B, int T,
                              int C, int NH, const struct rp_docs_s *docs);
void rp_attn_destroy(rp_attn_backend *a);   /* NULL and static backends are fine */

/* ---- activations of one micro-batch through one chunk, sized up front. */
typedef struct {
  float *ln1, *ln1_mean, *ln1_rstd;   /* N x C, N, N */
  float *qkv;                         /* N x 3C */
  float *atty;                        /* N x C, attention output */
  float *att_saved;                   /* backend's saved state */
  float *res2;                        /* N x C, x + attn proj */
  float *ln2, *ln2_mean, *ln2_rstd;   /* N x C, N, N */
  float *fch, *fch_gelu;              /* N x 4C each */
  float *res3;                        /* N x C, layer output */
} rp_layer_acts;

typedef struct {
  int B, T;
  int32_t *tokens, *targets, *pos;    /* N each (copied in by the caller) */
  const struct rp_docs_s *docs;       /* packed documents (NULL: one per row), the caller's */
  rp_attn_batch attn;                 /* prepared once per micro-batch (rp_attn_prepare) */
  float *input;                       /* N x C: embedding output or received activation
                                       * (under sequence parallelism the residual-stream
                                       * tensors -- input, ln1/2, res2/3, lnf and their
                                       * statistics -- have N/tp rows) */
  rp_layer_acts *layer;               /* num_layers */
  float *lnf, *lnf_mean, *lnf_rstd;   /* head: N x C, N, N */
  float *logits;                      /* head: N x Vp/tp (becomes dlogits in backward) */
  float *losses;                      /* head: N */
  float *xent_stats;                  /* head, tp > 1: N row maxima (then log-sum-exp
                                       * shifts), N sums of exp, N target logits */
  float *output;                      /* alias: last layer's res3 (or input if 0 layers) */
} rp_acts;

size_t rp_acts_bytes(const rp_chunk *m, const rp_attn_backend *attn, int B, int T);
/* Carve views from `mem` (rp_acts_bytes long, 64-byte aligned). `layer_views`
 * must hold num_layers entries and outlives acts. */
void rp_acts_bind(rp_acts *a, rp_layer_acts *layer_views, const rp_chunk *m,
                  const rp_attn_backend *attn, void *mem, int B, int T);
/* The same storage in two parts, for a split backward: `keep` bytes that the
 * weight-gradient pass W reads (every matmul's and LayerNorm's input, the
 * LayerNorm statistics, tokens and positions, the head's dlogits) and `drop`
 * bytes that only the input-gradient pass I or a full backward reads (QKV, the
 * attention's saved state, the pre-GELU activation, targets, losses), which can
 * be freed after I. keep + drop = rp_acts_bytes; rp_acts_bind carves the keep
 * part first. Both blocks 64-byte aligned. */
void rp_acts_split_bytes(const rp_chunk *m, const rp_attn_backend *attn, int B, int T,
                         size_t *keep, size_t *drop);
void rp_acts_bind_split(rp_acts *a, rp_layer_acts *layer_views, const rp_chunk *m,
                        const rp_attn_backend *attn, void *keep_mem, void *drop_mem, int B,
                        int T);

/* Gradient scratch for one chunk, shared by all micro-batches. */
typedef struct {
  float *dres;    /* N x C: gradient of the residual stream (in/out of a layer) */
  float *dbuf;    /* N x C */
  float *dln;     /* N x C */
  float *dqkv;    /* N x 3C */
  float *dfch;    /* N x 4C: gradient before GELU */
  float *dfch_gelu; /* N x 4C: gradient after GELU */
  void *mem;
} rp_grad_ws;
rp_status rp_grad_ws_init(rp_grad_ws *w, const rp_chunk *m, int B, int T);
void rp_grad_ws_free(rp_grad_ws *w);

/* ---- tensor-parallel collectives: the seam where tensor parallelism plugs
 * in (src/parallel/tensor_parallel.c implements it over the tp group). Every
 * call is collective over the group's `size` ranks and blocking for the
 * caller; rp_tp_local() is the one-rank table (no-ops, copies). */
typedef enum { RP_TP_SUM = 0, RP_TP_MAX = 1 } rp_tp_op;
typedef struct rp_tp_ops rp_tp_ops;
struct rp_tp_ops {
  int size, rank;
  /* buf[n] = op over ranks of buf[n], in place */
  void (*all_reduce)(const rp_tp_ops *o, float *buf, long n, rp_tp_op op);
  /* out[size * n] = rank 0's in[n], rank 1's in[n], ... */
  void (*all_gather)(const rp_tp_ops *o, float *out, const float *in, long n);
  /* out[n] = sum over ranks of their in[rank * n .. (rank + 1) * n) */
  void (*reduce_scatter)(const rp_tp_ops *o, float *out, const float *in, long n);
  /* One step of a ring, for collectives overlapped with compute (NULL when
   * overlap is off): send[n] goes to rank + 1 while recv[n] arrives from rank
   * - 1. Step k of a collective's size - 1 steps (k == 0 counts the
   * collective); the caller computes between ring_begin and ring_end,
   * calling ring_progress so that the transfer advances. One step in flight
   * at a time. sp.c builds the all-gather and the reduce-scatter from it. */
  void (*ring_begin)(const rp_tp_ops *o, const float *send, float *recv, long n, int k);
  void (*ring_progress)(const rp_tp_ops *o);
  void (*ring_end)(const rp_tp_ops *o);
  void *ctx;
};
const rp_tp_ops *rp_tp_local(void);

/* How a chunk computes: the pool, the attention backend, and an optional hook
 * called when the weight gradients of a unit (RP_UNIT_HEAD, a layer index
 * within the chunk, RP_UNIT_EMBED) are final for the current micro-batch, so
 * that data parallelism can start reducing them while backward goes on. */
enum { RP_UNIT_HEAD = -1, RP_UNIT_EMBED = -2 };
struct rp_bf16_ctx_s;
typedef struct {
  rp_pool *pool;
  const rp_attn_backend *attn;
  void (*grads_ready)(void *ctx, const rp_chunk *m, int unit);
  void *hook_ctx;
  /* the run's precision: bf16 copies of its chunks' weights, or NULL (fp32) */
  const struct rp_bf16_ctx_s *bf16;
  /* tensor-parallel collectives over the chunks' tp group; NULL: one rank */
  const rp_tp_ops *tp;
} rp_exec;

/* Forward pieces. The embed step reads a->tokens / a->pos and writes a->input.
 * Layers read a->input and write a->output. The head reads a->output and
 * a->targets and returns the SUM of per-token losses over valid targets (masked
 * -1 targets excluded); *valid (may be NULL) gets their count. */
void rp_chunk_embed_forward(const rp_chunk *m, rp_acts *a, const rp_exec *x);
void rp_chunk_layers_forward(const rp_chunk *m, rp_acts *a, const rp_exec *x);
double rp_chunk_head_forward(const rp_chunk *m, rp_acts *a, int *valid, const rp_exec *x);
/* Whole chunk: embed (if any), layers, head (if any; returns loss sum, else 0). */
double rp_chunk_forward(const rp_chunk *m, rp_acts *a, int *valid, const rp_exec *x);
/* A training step's forward that leaves the loss to the backward: embed, layers
 * and the head's logits, no cross-entropy. rp_chunk_backward's one pass over
 * the logits then writes the per-token losses (the bits rp_chunk_forward gives)
 * with dlogits, and rp_chunk_loss_sum reads them: one pass over the [N, Vp]
 * logits fewer (on the 124M shape 412 MB, a pass bound by memory). Only where
 * rp_chunk_loss_in_backward: a head without tensor or sequence parallelism,
 * whose cross-entropy needs the forward's reductions. */
int rp_chunk_loss_in_backward(const rp_chunk *m);
void rp_chunk_forward_logits(const rp_chunk *m, rp_acts *a, const rp_exec *x);
/* The sum of a->losses over valid targets (*valid, may be NULL: their count). */
double rp_chunk_loss_sum(const rp_acts *a, int *valid);

/* Backward pieces. dscale multiplies d(loss sum): pass 1/(valid tokens in the
 * global batch) so that grads are of the global mean loss whatever the layout.
 * Head: computes dlogits in place, accumulates head grads, writes w->dres.
 * Layers: consume w->dres (gradient w.r.t. a->output), leave the gradient w.r.t.
 * a->input in w->dres. Embed: consumes w->dres. */
void rp_chunk_head_backward(rp_chunk *m, rp_acts *a, rp_grad_ws *w, float dscale, const rp_exec *x);
/* Head backward from dlogits a loss head of the caller's choice computed
 * (policy gradient, KL, a value loss...): a->logits holds d loss / d logits
 * [N, Vp] instead of the logits; dlnf_extra [N, C] (may be NULL) is a second
 * head's gradient w.r.t. the final LayerNorm output a->lnf. Accumulates wte,
 * lnf gradients, writes w->dres, reports RP_UNIT_HEAD to the grads-ready hook;
 * rp_chunk_layers_backward and rp_chunk_embed_backward finish the job. Same
 * kernels (bf16, profiling) as the language-model head. */
void rp_chunk_head_backward_from_dlogits(rp_chunk *m, rp_acts *a, rp_grad_ws *w,
                                         const float *dlnf_extra, const rp_exec *x);
void rp_chunk_layers_backward(rp_chunk *m, rp_acts *a, rp_grad_ws *w, const rp_exec *x);
void rp_chunk_embed_backward(rp_chunk *m, rp_acts *a, rp_grad_ws *w, const rp_exec *x);
void rp_chunk_backward(rp_chunk *m, rp_acts *a, rp_grad_ws *w, float dscale, const rp_exec *x);

/* Zero-bubble split of backward: I (input gradient) now, W (weight gradient)
 * later. I keeps the gradients of each matmul's and LayerNorm's output in a
 * per-micro-batch stash; W turns them into weight gradients. I followed by W
 * gives bitwise the same gradients as rp_chunk_backward. The stash holds, per
 * layer, 11 N x C floats (dres3, dfch[4C], dln2, dres2, dqkv[3C], dln1), plus
 * dlnf (head) and the embedding's dres. The head's dlogits stay in a->logits. */
typedef struct {
  float *dres3, *dfch, *dln2, *dres2, *dqkv, *dln1;
} rp_layer_douts;
typedef struct {
  rp_layer_douts *layer;   /* num_layers */
  float *dlnf;             /* head */
  float *dembed;           /* embed */
} rp_wstash;
size_t rp_wstash_bytes(const rp_chunk *m, int B, int T);
void rp_wstash_bind(rp_wstash *s, rp_layer_douts *layer_views, const rp_chunk *m, void *mem,
                    int B, int T);
/* I: gradient w.r.t. the chunk input left in w->dres (as rp_chunk_backward). */
void rp_chunk_backward_input(rp_chunk *m, rp_acts *a, rp_grad_ws *w, rp_wstash *s, float dscale,
                             const rp_exec *x);
/* W: accumulates every weight gradient of the chunk from the stash. Under
 * recomputation it first rebuilds what it reads that was dropped (a second
 * recompute: I's copy in the shared scratch is gone), bitwise as B. */
void rp_chunk_backward_weight(rp_chunk *m, rp_acts *a, const rp_wstash *s,
                              const rp_exec *x);

/* ---- bf16 mixed precision (src/model/precision.c): bf16 copies of the chunks'
 * parameters (refreshed from the fp32 masters after each optimizer step) are what
 * the matmuls read; activations are rounded to bf16 on the way into each matmul
 * (inside the bf16 GEMM's packing where the kernel can, rp_bf16.h _f32 calls);
 * accumulation and every other computation stay fp32. A run hands its context
 * to the model in rp_exec.bf16 (NULL: fp32). */
#define RP_BF16_MAX_CHUNKS 16
typedef struct rp_bf16_ctx_s {
  int n;
  const float *base[RP_BF16_MAX_CHUNKS];
  size_t len[RP_BF16_MAX_CHUNKS];
  uint16_t *base16[RP_BF16_MAX_CHUNKS];
  float *scratch_f; /* a matmul's product when its output aliases the residual */
  size_t scratch_floats;
} rp_bf16_ctx;
rp_status rp_bf16_ctx_init(rp_bf16_ctx *c, rp_chunk *const *chunks, int n, int B, int T);
/* fp32 masters -> bf16 copies (round to nearest even, or stochastic rounding) */
void rp_bf16_ctx_refresh(rp_bf16_ctx *c, int stochastic, uint64_t seed, rp_pool *pool);
void rp_bf16_ctx_free(rp_bf16_ctx *c);

/* FLOPs of one token's forward+backward (6N + 12 L T C style, for MFU). */
double rp_gpt_flops_per_token(const rp_gpt_config *cfg, int T);
/* rp_gemm_peak (bf16: rp_gemm_peak_bf16) on this model's matmul shapes (a
 * layer's four and the LM head's) with B x T rows: the MFU denominator of a
 * run at that precision. per_shape (may be NULL) gets RP_GPT_GEMM_SHAPES
 * rates: qkv, attention projection, c_fc, c_proj, LM head. */
#define RP_GPT_GEMM_SHAPES 5
struct rp_gemm_shape_rate; /* rp_kernels.h */
double rp_gpt_gemm_peak(const rp_gpt_config *cfg, int B, int T, int bf16, rp_pool *pool,
                        void *scratch, size_t scratch_bytes,
                        struct rp_gemm_shape_rate *per_shape);

#endif
