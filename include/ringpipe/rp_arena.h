/* Arenas: 64-byte aligned, NUMA-local memory with per-category accounting.
 *
 * Every large buffer in ringpipe comes from rp_alloc with a category so that the
 * peak bytes per category are exact and can be printed next to the formulas
 * (parameters, gradients, optimizer state, activations, workspace, comm buffers).
 * Small bookkeeping (structs, strings) uses plain malloc. */
#ifndef RP_ARENA_H
#define RP_ARENA_H

#include <stddef.h>
#include "rp_base.h"

typedef enum {
  RP_MEM_PARAMS = 0,
  RP_MEM_GRADS,
  RP_MEM_OPTIM,
  RP_MEM_ACTS,
  RP_MEM_WORKSPACE,
  RP_MEM_COMM,
  RP_MEM_DATA,
  RP_MEM_NCAT
} rp_mem_cat;

const char *rp_mem_cat_name(rp_mem_cat cat);

/* Zero-filled, 64-byte aligned, placed on the local NUMA node when libnuma says
 * NUMA is available. Returns NULL (and sets rp_err RP_ENOMEM) on failure. */
void *rp_alloc(size_t bytes, rp_mem_cat cat);
void rp_free(void *p);             /* NULL is fine; category is remembered */

size_t rp_mem_current(rp_mem_cat cat);
size_t rp_mem_peak(rp_mem_cat cat);
size_t rp_mem_peak_total(void);    /* peak of the sum, not the sum of peaks */
size_t rp_mem_process_peak_rss(void); /* the kernel's peak RSS of the process */
void rp_mem_reset_peaks(void);     /* peak := current, for per-phase measurement */

/* Per-call workspace that is reused: like rp_alloc(bytes, RP_MEM_WORKSPACE)
 * (zero-filled, accounted while held), but rp_scratch_free keeps the block for
 * the next rp_scratch_alloc that fits (a few are kept, not counted), so a
 * kernel called every layer does not map and fault in fresh pages each time.
 * rp_scratch_release frees the kept blocks. Pair rp_scratch_alloc with
 * rp_scratch_free. */
void *rp_scratch_alloc(size_t bytes);
void rp_scratch_free(void *p);
void rp_scratch_release(void);

/* Writes "params 1.2 MiB, grads ..., total peak ..." into buf. */
void rp_mem_report(char *buf, size_t n);


#endif
