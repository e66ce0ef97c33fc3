/* Inference: a paged K/V cache, prefill, batched incremental decode, and token
 * sampling. One engine under `ringpipe sample`, the short sample at the end of
 * training and the RL rollouts (and, later, the multi-turn serving engine).
 *
 * The cache is a pool of fixed-size blocks. A block holds RP_KV_BLOCK
 * consecutive positions of one sequence for every layer:
 *
 *   block [L][2][RP_KV_BLOCK][C]   (K then V per layer; head h in columns h*HS..)
 *
 * so a block is one self-contained unit that can be written to a file, read
 * back, or sent to another rank (rp_kv_block_data), and a layer's part of it is
 * contiguous (2 * RP_KV_BLOCK * C floats) for layer-by-layer streaming. A slot
 * (one sequence being decoded) owns a table of blocks: position t lives in
 * block table[t / RP_KV_BLOCK] at row t % RP_KV_BLOCK. Full blocks are
 * immutable and may be shared by several slots (a prompt prefilled once for G
 * completions shares its full blocks, reference-counted); the last, partly
 * filled block of a slot is always its own, so decoding never writes a shared
 * block.
 *
 * Costs per decoded token: the matmuls of one row (O(params)) and attention
 * over the cached positions (O(L len C)); a full recompute was O(len params).
 *
 * Shapes: S slots, Tmax positions per slot (<= the model's T), n rows per
 * decode call, V vocab (Vp padded), C channels, L layers. */
#ifndef RP_INFER_H
#define RP_INFER_H

#include <stddef.h>
#include <stdint.h>
#include "rp_model.h"
#include "rp_util.h"

#define RP_KV_BLOCK 64 /* positions per cache block */

typedef struct {
  const rp_chunk *m;
  const rp_attn_backend *attn;  /* prefill's attention */
  int S, Tmax;
  /* block pool */
  int nblocks, blocks_per_slot;
  size_t block_floats;          /* L * 2 * RP_KV_BLOCK * C */
  float *blocks;                /* nblocks * block_floats */
  int *refs;                    /* per block: slots holding it (0: free) */
  int *free_ids, nfree;         /* stack of free blocks */
  int *table;                   /* S * blocks_per_slot block ids (-1: none) */
  int *len;                     /* S: positions filled per slot */
  /* decode scratch for up to `rows` rows */
  int rows;
  float *x, *ln, *qkv, *atty, *fch, *fch_gelu, *lnf, *mean, *rstd, *logits;
  int32_t *tok, *pos;
  int *row_slot;
  /* prefill: activations of one prompt (B = 1, T = Tmax) */
  void *acts_mem;
  rp_layer_acts *lv;
  /* called before each layer of a decode / extend (layer-wise loading) */
  void (*layer_hook)(void *ctx, int layer);
  void *layer_hook_ctx;
} rp_kv_cache;

/* A cache of S slots, each up to Tmax positions, for the whole model m (one
 * chunk with embeddings, every layer and the head). Enough blocks for every
 * slot to fill up without sharing. */
rp_status rp_kv_init(rp_kv_cache *c, const rp_chunk *m, const rp_attn_backend *attn, int S,
                     int Tmax);
void rp_kv_free(rp_kv_cache *c);
/* Empties a slot (its blocks go back to the pool once no slot holds them). */
void rp_kv_release(rp_kv_cache *c, int slot);
/* Runs prompt tokens[0..n) through the ordinary forward once (the prefill
 * attention backend: flash or reference) and stores its K/V for slots
 * s0..s0+count-1 (emptied first): full blocks shared, the partial last block
 * copied per slot. Returns the logits row of the last prompt position (Vp
 * floats, valid until the next call), NULL with rp_errmsg() set on bad
 * arguments. */
const float *rp_kv_prefill(rp_kv_cache *c, int s0, int count, const int32_t *tokens, int n,
                           const rp_exec *x);
/* One decoding step for n distinct slots: token tok[i] enters slot slots[i] at
 * position len[slot] (then len++). Returns logits [n, Vp] (valid until the
 * next call), NULL on bad arguments (a full slot, n > S). */
const float *rp_kv_step(rp_kv_cache *c, const int *slots, const int32_t *tok, int n,
                        const rp_exec *x);
/* Appends tokens[0..n) to slot (a new turn on a cached prefix): each token
 * attends to the cached positions and to the new ones before it. Returns the
 * logits row of the last token, NULL on bad arguments. */
const float *rp_kv_extend(rp_kv_cache *c, int slot, const int32_t *tokens, int n,
                          const rp_exec *x);

/* Blocks of a slot, for storing or sending them: *ids points at the slot's
 * table (ceil(len / RP_KV_BLOCK) entries, returned). */
int rp_kv_slot_blocks(const rp_kv_cache *c, int slot, const int **ids);
/* A block's floats ([L][2][RP_KV_BLOCK][C]) and their size in bytes. */
float *rp_kv_block_data(const rp_kv_cache *c, int id);
size_t rp_kv_block_bytes(const rp_kv_cache *c);
/* Loads cached blocks into a slot (emptied first): the slot gets nblocks
 * fresh blocks holding positions 0..len, copied from blocks[i] (whole blocks,
 * [L][2][RP_KV_BLOCK][C]), or left to be filled layer by layer with
 * rp_kv_attach_layer when blocks is NULL. (nblocks - 1) * RP_KV_BLOCK < len
 * <= nblocks * RP_KV_BLOCK. RP_EINVAL on bad arguments. */
rp_status rp_kv_attach(rp_kv_cache *c, int slot, const float *const *blocks, int nblocks,
                       int len);
/* Layer `layer` of the slot's block b from src (2 * RP_KV_BLOCK * C floats:
 * K then V), for streaming a prefix in layer by layer. */
void rp_kv_attach_layer(rp_kv_cache *c, int slot, int b, int layer, const float *src);
/* A hook called by every decode step and extend before a layer reads the
 * cache (layer l's K/V may still be arriving while l-1 computes). NULL: none. */
void rp_kv_set_layer_hook(rp_kv_cache *c, void (*hook)(void *ctx, int layer), void *ctx);

/* Blocks in use (held by at least one slot). */
int rp_kv_blocks_used(const rp_kv_cache *c);

/* ------------------------------------------------------------------ sampling */

typedef struct {
  float temperature;   /* 0: greedy */
  int top_k;           /* 0: all */
  float top_p;         /* 1: all */
  int max_new;         /* tokens per completion at most */
  int stop;            /* stop token (included in the completion), -1 for none */
} rp_sample_params;

/* Picks a token from one logits row (first V of them). probs: V floats of
 * scratch, idx: V ints of scratch (top-k / top-p sorting). Greedy ties go to
 * the lowest id; the kept set of top-k / top-p is a total order (probability,
 * then id), so a choice is deterministic. */
int rp_sample_token(const float *logits, int V, const rp_sample_params *sp, rp_rng *rng,
                    float *probs, int *idx);

/* n_new tokens after prompt[0..n_prompt) into out, one draw of rng per token
 * (none when greedy). Through the KV cache: O(len) per token. A context longer
 * than the model's T keeps its last T/2 tokens and is prefilled again (the
 * positions restart), so each token stays O(T) amortised. */
rp_status rp_generate(const rp_chunk *m, const rp_exec *x, const int32_t *prompt, int n_prompt,
                      int32_t *out, int n_new, const rp_sample_params *sp, rp_rng *rng);
/* The reference: a full forward over the context for every new token (the last
 * T tokens once the context is longer). Within T tokens it picks the tokens
 * rp_generate picks, up to the rounding of near-ties. */
rp_status rp_generate_recompute(const rp_chunk *m, const rp_exec *x, const int32_t *prompt,
                                int n_prompt, int32_t *out, int n_new,
                                const rp_sample_params *sp, rp_rng *rng);

#endif
