/* Context parallelism: the sequence is split over the P ranks of a cp
 * communicator, and attention runs as a ring (K/V blocks passed around while the
 * workers compute) or as Ulysses (all-to-all from sequence shards to head shards).
 *
 * Layouts (which global positions rank r of P holds, for a sequence of T):
 * - zigzag (load-balanced, the default): the sequence is cut into 2P chunks of
 *   T/(2P) rows; rank r keeps chunks r and 2P-1-r, in that order, so that every
 *   rank does the same causal attention work. Needs T % (2P) == 0.
 * - contiguous: rank r keeps rows [r*T/P, (r+1)*T/P). Needs T % P == 0. The last
 *   rank does (2P-1)/P times the mean work; kept to show the imbalance.
 * Every rank holds T_local = T/P rows either way. Local row t of rank r is at
 * global position rp_cp_global_pos(...); position ids fed to the model are the
 * global ones.
 *
 * The backends plug into the model as rp_attn_backend (rp_model.h): the model
 * calls forward/backward with T = T_local and the local qkv[B,T_local,3C]. One
 * backend serves every layer and micro-batch: its buffers are scratch reused by
 * each call, and the only state carried from forward to backward is the row
 * log-sum-exp L[B,NH,T_local] in the model's att_saved slot. Every call is
 * collective over the cp communicator, made by the main thread (MPI FUNNELED).
 *
 * Shapes: B batch, T global sequence, P = cp ranks, C channels, NH heads,
 * HS = C/NH head size. */
#ifndef RP_CP_H
#define RP_CP_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "rp_base.h"
#include "rp_flash.h"
#include "rp_docs.h"
#include "rp_model.h"

/* --cp-impl ring|ulysses, in that order. */
typedef enum { RP_CP_RING = 0, RP_CP_ULYSSES = 1 } rp_cp_impl;
/* --cp-layout zigzag|contiguous, in that order. */
typedef enum {
  RP_CP_ZIGZAG = 0,      /* chunks r and 2P-1-r of 2P */
  RP_CP_CONTIGUOUS = 1   /* one contiguous block of T/P rows */
} rp_cp_layout;

const char *rp_cp_layout_name(rp_cp_layout layout);
/* "zigzag" or "contiguous" (the --cp-layout values). */
rp_status rp_cp_layout_parse(const char *name, rp_cp_layout *out);

/* RP_EINVAL with a message naming T, P and the fix when T cannot be split. */
rp_status rp_cp_check(rp_cp_layout layout, int T, int P);

/* The pieces of the global sequence rank r holds, in local row order: piece i
 * is local rows [local0[i], local0[i]+len) = global [global0[i], global0[i]+len). */
typedef struct {
  int n;            /* 2 for zigzag, 1 for contiguous */
  int len;          /* rows per piece */
  int local0[2], global0[2];
} rp_cp_pieces;

rp_status rp_cp_pieces_of(rp_cp_pieces *pc, rp_cp_layout layout, int T, int P, int r);
/* Global position of local row t (0 <= t < T/P); layout must be valid. */
long rp_cp_global_pos(const rp_cp_pieces *pc, int t);

/* pos[B, T/P] = the global position ids of rank r's rows (same for every b). */
rp_status rp_cp_positions(int32_t *pos, int B, rp_cp_layout layout, int T, int P, int r);

/* local[outer, T/P, row] = rank r's rows of full[outer, T, row] (row_bytes bytes
 * per row): tokens and targets are [B,T] with row_bytes = 4; a statistic such as
 * L[B,NH,T] is outer = B*NH, row_bytes = 4. No communication: every cp rank
 * reads the same micro-batch and keeps its rows. */
rp_status rp_cp_shard_rows(void *local, const void *full, size_t row_bytes, int outer,
                           rp_cp_layout layout, int T, int P, int r);
/* Inverse: writes rank r's rows of full from local (other rows untouched). */
rp_status rp_cp_unshard_rows(void *full, const void *local, size_t row_bytes, int outer,
                             rp_cp_layout layout, int T, int P, int r);
/* full[outer, T, row] on every rank from each rank's local shard (collective
 * over cp_comm, P = its size). */
rp_status rp_cp_gather_rows(void *full, const void *local, size_t row_bytes, int outer,
                            rp_cp_layout layout, int T, MPI_Comm cp_comm);
/* Tokens/targets [B,T] -> [B,T/P] (rp_cp_shard_rows with 4-byte rows). */
rp_status rp_cp_shard_tokens(int32_t *local, const int32_t *full, int B, rp_cp_layout layout,
                             int T, int P, int r);

/* Causal (query, key) pairs that rank r's queries see over the whole sequence:
 * the attention work of the rank (times 4*HS flops per head forward). */
double rp_cp_visible_pairs(rp_cp_layout layout, int T, int P, int r);

/* ---- packed rows (rp_docs.h): where each rank's rows of a packed batch lie.
 * - ROW: the base layout's pieces of the whole row (zigzag or contiguous),
 *   blind to documents: shows the imbalance of mixed lengths;
 * - DOC_ZIGZAG: every document split into 2P chunks, rank r taking chunks r
 *   and 2P-1-r of each (the THD convention); each document's length must be a
 *   multiple of 2P (the loader pads documents so: --pack-align);
 * - BALANCED: the row cut into blocks of T/(kP) rows (k >= 16 per rank where
 *   T allows), each block's causal cost counted (sum over its tokens of the
 *   keys they see inside their document), and blocks dealt greedily, most
 *   expensive first, to the least loaded rank that still has room: no
 *   padding, any document lengths.
 * Every rank computes the same placement from the same batch. */
typedef enum { RP_CP_PLACE_ROW = 0, RP_CP_PLACE_DOC_ZIGZAG, RP_CP_PLACE_BALANCED } rp_cp_place;
/* --cp-layout zigzag|contiguous|doc-zigzag|balanced, in that order: the first
 * two are ROW placements of those layouts; doc-zigzag and balanced place packed
 * documents, over base layout zigzag / contiguous for the shape checks. */
typedef enum {
  RP_CP_SPLIT_ZIGZAG = 0,
  RP_CP_SPLIT_CONTIGUOUS,
  RP_CP_SPLIT_DOC_ZIGZAG,
  RP_CP_SPLIT_BALANCED
} rp_cp_split;
void rp_cp_split_resolve(rp_cp_split split, rp_cp_layout *base, rp_cp_place *place);
const char *rp_cp_place_name(rp_cp_place place);
/* Fills d->cp, d->gpos for P ranks. RP_EINVAL naming the row, document and fix
 * when the placement cannot place a document (DOC_ZIGZAG, a length that 2P
 * does not divide) or T cannot be split. */
rp_status rp_cp_docs_place(rp_docs *d, rp_cp_layout base, rp_cp_place place, int P);
/* local[B, T/P, row] = rank r's rows of full[B, T, row] (placed d). */
void rp_cp_docs_shard(void *local, const void *full, size_t row_bytes, const rp_docs *d, int r);
/* The rank's position ids (restarting per document) for its rows. */
void rp_cp_docs_positions(int32_t *pos, const rp_docs *d, int r);
/* Visible (query, key) pairs of rank r's queries: its attention work. */
double rp_cp_docs_work(const rp_docs *d, int r);
/* Rows of rank r's row b (T/P of them, ascending). */
static inline const int32_t *rp_cp_docs_rows(const rp_docs *d, int b, int r) {
  return d->gpos + ((long)b * d->cp + r) * (d->T / d->cp);
}

/* SVG of how a packed row is placed, one panel per placement given: a strip of
 * the row's tokens coloured by owning rank (document boundaries marked), and
 * the (query block, key block) matrix
 * of the row in blocks of `block` tokens, a cell coloured by the query block's
 * owner when some pair in it is visible, with each rank's work share in the
 * title. docs[i] is placed over P ranks (rp_cp_docs_place); names label them. */
rp_status rp_cp_docs_svg(const char *path, const rp_docs *const *docs, const char *const *names,
                         int n, int block);

/* ---- backends */

/* Ring attention. cp_comm is duplicated (messages never mix with the caller's);
 * creation is collective over it. T_global is the sequence the trainer will use
 * (checked here so that a bad T fails at start-up on every rank alike; a call
 * with T_local needs T_local*P to be valid for the layout). overlap = 1 posts the
 * transfer of step i+1 before the compute of step i and keeps MPI progressing
 * while the workers compute; 0 does compute then transfer (the baseline). */
rp_status rp_cp_ring_create(rp_attn_backend **out, MPI_Comm cp_comm, rp_cp_layout layout,
                            int T_global, int overlap);
/* Ulysses all-to-all attention: needs NH % P == 0 (checked here). */
rp_status rp_cp_ulysses_create(rp_attn_backend **out, MPI_Comm cp_comm, rp_cp_layout layout,
                               int T_global, int NH);
/* The flash settings the backend's tiles run with (default automatic); checked,
 * copied. RP_EINVAL if a is not a cp backend or cfg is invalid. */
rp_status rp_cp_set_flash(rp_attn_backend *a, const rp_flash_config *cfg);
/* Either kind; collective (frees the duplicated communicator). NULL is fine. */
void rp_cp_destroy(rp_attn_backend *a);

/* Time and work accounting of one direction (forward or backward), summed over
 * calls since creation or the last reset. */
typedef struct {
  long calls;
  double total_s;     /* wall time inside the backend's forward (or backward) */
  double wait_s;      /* main thread blocked on transfers: the exposed communication */
  double compute_s;   /* time from launching attention tiles until they finished */
  double flops;       /* attention flops of the visible (query, key) pairs run here */
  double bytes_sent;  /* payload this rank sent */
} rp_cp_stats;

/* fwd/bwd may be NULL. RP_EINVAL if a is not a cp backend. */
rp_status rp_cp_get_stats(const rp_attn_backend *a, rp_cp_stats *fwd, rp_cp_stats *bwd);
void rp_cp_reset_stats(rp_attn_backend *a);

#endif
