/* Private to the bf16 files: micro-kernel descriptors, the panel packer and the
 * CPU-specific entry points (defined in gemm_bf16_avx512.c, only called when the
 * rp_isa.h ceiling allows them).
 *
 * A micro-kernel computes one MR x NR tile of C over kp pairs of k:
 *   C[0:mr, 0:nr] (ldc) = start + A_panel (MR rows, zero padded) * B_panel (NR cols)
 * where start is C itself when load_c, else the NR-float row `init` (bias) for
 * every row, else +0. Panels are packed as rp_bf16.h describes (PAIRS: uint32
 * [kp][width]; F32: float [2*kp][width]). Only mr rows and nr columns of C are
 * read or written. */
#ifndef RP_GEMM_BF16_INTERNAL_H
#define RP_GEMM_BF16_INTERNAL_H

#include <stdint.h>

#include "ringpipe/rp_bf16.h"

#define RP_BF16_NR 64 /* columns per B panel: 4 zmm vectors of fp32 */
/* most rows of a row-pair block rp_bf16_pack_block packs in one sweep */
#define RP_BF16_BLOCK_MAX 256
/* PAIRS panels hold a multiple of this many pairs (zero past K): the AMX kernel
 * steps k by a tile of 16 pairs, the others stop at K. */
#define RP_BF16_PAIRS_KALIGN 16

typedef void (*rp_bf16_ukr)(long kp, const void *a, const void *b, float *c, long ldc,
                            int mr, int nr, const float *init, int load_c);

typedef struct rp_bf16_src_s rp_bf16_src;

/* Packs A rows [r0, r0 + nrows) by pairs [p0, p0 + kp) into ceil(nrows / mr)
 * panels of the kernel's own layout, kp * mr slots each. */
typedef void (*rp_bf16_pack_a_fn)(const rp_bf16_src *s, int r0, int nrows, long p0, long kp,
                                  void *out);

typedef struct {
  rp_bf16_kernel kernel;
  rp_bf16_fmt fmt;
  int mr;   /* rows of a tile (A panel width) */
  int kc;   /* pairs of k per block (C tiles are reloaded once per block) */
  int mc;   /* rows per packed A block (multiple of mr) */
  rp_bf16_ukr ukr;
  /* optional (0 / NULL for the SIMD-register kernels): */
  int kalign;                 /* the kernel runs k in steps of this many pairs (padded) */
  rp_bf16_pack_a_fn pack_a;   /* A panels in another layout than rp_bf16_pack_block's */
  void (*begin)(void);        /* before a thread's share of a GEMM (AMX tile config) */
  void (*end)(void);          /* after it (AMX tile release) */
  int a32;                    /* pack_a reads fp32 sources (rp_bf16_src.src32) */
  /* B panels (RP_BF16_NR wide, kp pairs) of an fp32 row-pair source, rounded as
   * packed; NULL: rp_bf16_pack_block rounds them (plain C) */
  rp_bf16_pack_a_fn pack_b32;
  /* B panels of a k-contiguous bf16 source (the forward's weight); NULL:
   * rp_bf16_pack_block */
  rp_bf16_pack_a_fn pack_b16k;
} rp_bf16_kdesc;

/* fp32 bits -> bf16, round to nearest even; NaN stays a quiet NaN (the rule of
 * rp_bf16_from_f32, branch-free so that loops over it vectorize). */
static inline uint16_t rp_bf16_rne_bits(uint32_t u) {
  uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  uint32_t q = (u >> 16) | 0x40u; /* NaN: keep sign and payload top, make it quiet */
  return (uint16_t)((u & 0x7FFFFFFFu) > 0x7F800000u ? q : r);
}

/* Bytes per (pair, row or column) of a packed panel. */
static inline long rp_bf16_slot_bytes(rp_bf16_fmt fmt) { return fmt == RP_BF16_FMT_PAIRS ? 4 : 8; }

/* A matrix element source: X(r, k) = kcontig ? src[r*ld + k] : src[k*ld + r],
 * r < rows, k < K (zero outside). */
struct rp_bf16_src_s {
  const uint16_t *src;
  long ld;
  int kcontig;
  int rows, K;
  const float *src32; /* non-NULL: elements are fp32 here, rounded (RNE) as packed;
                         only kernels with a32 take it */
};

/* Packs rows [r0, r0 + width) (zero past rows) by pairs [p0, p0 + kp) (zero past
 * K) into out as a width-wide panel of format fmt. */
void rp_bf16_pack_panel(rp_bf16_fmt fmt, const rp_bf16_src *s, int r0, int width, long p0,
                        long kp, void *out);

/* ceil(nrows / width) such panels for rows r0.., one after another. */
void rp_bf16_pack_block(rp_bf16_fmt fmt, const rp_bf16_src *s, int r0, int nrows, int width,
                        long p0, long kp, void *out);

/* The kernel descriptor that runs a packed operand of format fmt now: the active
 * kernel when its format matches, else the best supported kernel of that format. */
const rp_bf16_kdesc *rp_bf16_kdesc_for_fmt(rp_bf16_fmt fmt);
const rp_bf16_kdesc *rp_bf16_kdesc_active(void);
int rp_bf16_is_forced_portable(void);

/* gemm_bf16_avx512.c */
void rp_bf16_ukr_avx512_fma(long kp, const void *a, const void *b, float *c, long ldc,
                            int mr, int nr, const float *init, int load_c);
void rp_bf16_ukr_avx512_bf16(long kp, const void *a, const void *b, float *c, long ldc,
                             int mr, int nr, const float *init, int load_c);
/* The vdpbf16ps kernel's A packer: fp32 sources (src32) rounded as packed, bf16
 * ones through rp_bf16_pack_block. */
void rp_bf16_dp_pack_a(const rp_bf16_src *s, int r0, int nrows, long p0, long kp, void *out);
/* pack_b32 of the AVX-512 kernels: PAIRS panels (vdpbf16ps, AMX) and F32 ones
 * (the FMA kernel) */
void rp_bf16_pack_b32_pairs(const rp_bf16_src *s, int r0, int nrows, long p0, long kp,
                            void *out);
/* pack_b16k of the vdpbf16ps and AMX kernels (PAIRS panels) */
void rp_bf16_pack_b16_pairs(const rp_bf16_src *s, int r0, int nrows, long p0, long kp,
                            void *out);
void rp_bf16_pack_b32_f32(const rp_bf16_src *s, int r0, int nrows, long p0, long kp,
                          void *out);
#define RP_BF16_MR_FMA 6
#define RP_BF16_MR_DP 6

/* gemm_bf16_avx2.c: the avx512-fma kernel's F32 panels on AVX2 (6-row A panels) */
void rp_bf16_ukr_avx2_fma(long kp, const void *a, const void *b, float *c, long ldc, int mr,
                          int nr, const float *init, int load_c);
#define RP_BF16_MR_AVX2 6

/* gemm_bf16_amx.c (compiled with the AMX flags where the compiler has them) */
#define RP_BF16_MR_AMX 32
#define RP_BF16_AMX_KC 256 /* pairs per k block; the summation order depends on it */
void rp_bf16_ukr_amx(long kp, const void *a, const void *b, float *c, long ldc, int mr,
                     int nr, const float *init, int load_c);
void rp_bf16_amx_pack_a(const rp_bf16_src *s, int r0, int nrows, long p0, long kp, void *out);
void rp_bf16_amx_begin(void);
void rp_bf16_amx_end(void);
/* Runs `iters` steps of 4 tdpbf16ps on loaded tiles; returns the flops done. */
double rp_bf16_amx_probe_flops(long iters);

/* gemm_bf16.c: the portable micro-kernels and their descriptors */
extern const rp_bf16_kdesc rp_bf16_kd_portable_f32, rp_bf16_kd_portable_pairs;
extern const rp_bf16_kdesc rp_bf16_kd_avx512_fma, rp_bf16_kd_avx512_bf16, rp_bf16_kd_amx,
    rp_bf16_kd_avx2_fma;

#endif
