/* GPT-2 byte-level BPE (internal to src/io): pre-tokenisation and merges. */
#ifndef RP_IO_BPE_H
#define RP_IO_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "ringpipe/rp_base.h"

/* End of the pre-token that starts at byte i of s[0..n), per GPT-2's pattern
 * 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * (leftmost alternative first, as a backtracking regex engine matches it). A
 * byte that is not valid UTF-8 counts as one character of the "other" class. */
size_t rp_gpt2_piece_end(const unsigned char *s, size_t n, size_t i);

/* Merge table over a token list whose ids are the merge ranks (llm.c's GPT-2
 * file: token id = rank; the 256 single bytes are tokens). Token i's bytes are
 * blob[off[i] .. off[i+1]); the blob and offsets stay owned by the caller.
 * skip_id (e.g. end-of-text, or -1) is never produced from text. RP_EINVAL if a
 * single byte is not a token (such a table cannot encode every text). */
typedef struct rp_bpe rp_bpe;
rp_status rp_bpe_build(rp_bpe **out, const char *blob, const uint32_t *off, int V, int skip_id);
void rp_bpe_free(rp_bpe *b);
/* Pre-tokenises and encodes text; RP_EINVAL if more than cap ids would be
 * written (cap >= len always suffices: every id covers at least one byte). */
rp_status rp_bpe_encode(rp_bpe *b, const unsigned char *text, size_t len, int32_t *out,
                        size_t cap, size_t *n);

/* The two merge loops behind rp_bpe_encode for one piece that is not a token
 * itself (public here for the test that they agree): a scan, O(n^2), for
 * pieces up to RP_BPE_HEAP_MIN bytes, and a heap, O(n log n), for longer ones
 * (a megabyte without a space, base64 or a minified file, stays fast). Both
 * append the piece's ids at out[*n]. */
#define RP_BPE_HEAP_MIN 64
rp_status rp_bpe_merge_linear(rp_bpe *b, const unsigned char *p, size_t n, int32_t *out,
                              size_t cap, size_t *n_out);
rp_status rp_bpe_merge_heap(rp_bpe *b, const unsigned char *p, size_t n, int32_t *out,
                            size_t cap, size_t *n_out);

#endif
