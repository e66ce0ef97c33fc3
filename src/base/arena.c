/* Categorized, 64-byte aligned, NUMA-local allocation with exact accounting. */
#include <numa.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "ringpipe/rp_arena.h"

/* Each block starts with this header in its first 64 bytes so that rp_free knows
 * the size, category and allocator without a lookup table. */
typedef struct {
  size_t bytes;     /* user bytes */
  size_t total;     /* bytes obtained from the system */
  int cat;
  int numa;
} block_hdr;

#define HDR 64

static _Atomic size_t cur[RP_MEM_NCAT], peak[RP_MEM_NCAT];
static _Atomic size_t cur_total, peak_total;
static int numa_state = -2;  /* -2 unknown, -1 unavailable, 0 available */

static const char *cat_names[RP_MEM_NCAT] = {"params", "grads", "optimizer", "activations",
                                             "workspace", "comm", "data"};

const char *rp_mem_cat_name(rp_mem_cat cat) {
  return (cat >= 0 && cat < RP_MEM_NCAT) ? cat_names[cat] : "?";
}

static void raise_peak(_Atomic size_t *pk, size_t now) {
  size_t old = atomic_load(pk);
  while (now > old && !atomic_compare_exchange_weak(pk, &old, now)) {
  }
}

static void account(int cat, size_t bytes, int sign) {
  if (sign > 0) {
    raise_peak(&peak[cat], atomic_fetch_add(&cur[cat], bytes) + bytes);
    raise_peak(&peak_total, atomic_fetch_add(&cur_total, bytes) + bytes);
  } else {
    atomic_fetch_sub(&cur[cat], bytes);
    atomic_fetch_sub(&cur_total, bytes);
  }
}

/* Blocks of 2 MiB and more ask for transparent huge pages before their first
 * touch. Where the system leaves THP to the program ("madvise", Debian's
 * default) every buffer was in 4 KiB pages, and the GEMMs' packing walks rows
 * of activations and weights a page or more apart: one TLB entry per row.
 * Default model, 3 alternating pairs of `train --steps 16 --profile`: quiet
 * step 222-226 -> 216-219 ms, fwd GELU 3.3 -> 2.9 ms; 124M shape, 2 pairs:
 * quiet step 4.50-4.54 -> 4.43-4.46 s. A system with THP "never" ignores the
 * advice, and a failure changes nothing but the page size. */
static void ask_huge_pages(char *raw, size_t total) {
#ifdef MADV_HUGEPAGE
  if (total < (2u << 20)) return;
  uintptr_t page = (uintptr_t)raw & ~(uintptr_t)4095; /* madvise wants a page start */
  (void)madvise((void *)page, total + ((uintptr_t)raw - page), MADV_HUGEPAGE);
#else
  (void)raw, (void)total;
#endif
}

void *rp_alloc(size_t bytes, rp_mem_cat cat) {
  if (cat < 0 || cat >= RP_MEM_NCAT) cat = RP_MEM_WORKSPACE;
  if (numa_state == -2) numa_state = numa_available() < 0 ? -1 : 0;
  size_t total = HDR + ((bytes + 63) & ~(size_t)63);
  char *raw;
  int use_numa = numa_state == 0 && total >= (1u << 16);
  if (use_numa)
    raw = numa_alloc_local(total);  /* page aligned, zeroed on first touch */
  else
    raw = aligned_alloc(64, total);
  if (!raw) {
    rp_err(RP_ENOMEM, "out of memory allocating %.1f MiB for %s", bytes / 1048576.0,
           rp_mem_cat_name(cat));
    return NULL;
  }
  ask_huge_pages(raw, total);
  memset(raw, 0, total);
  block_hdr *h = (block_hdr *)raw;
  h->bytes = bytes;
  h->total = total;
  h->cat = cat;
  h->numa = use_numa;
  account(cat, bytes, +1);
  return raw + HDR;
}

void rp_free(void *p) {
  if (!p) return;
  char *raw = (char *)p - HDR;
  block_hdr *h = (block_hdr *)raw;
  account(h->cat, h->bytes, -1);
  if (h->numa)
    numa_free(raw, h->total);
  else
    free(raw);
}

size_t rp_mem_current(rp_mem_cat cat) { return atomic_load(&cur[cat]); }
size_t rp_mem_peak(rp_mem_cat cat) { return atomic_load(&peak[cat]); }
size_t rp_mem_peak_total(void) { return atomic_load(&peak_total); }

void rp_mem_reset_peaks(void) {
  for (int c = 0; c < RP_MEM_NCAT; c++) atomic_store(&peak[c], atomic_load(&cur[c]));
  atomic_store(&peak_total, atomic_load(&cur_total));
}

void rp_mem_report(char *buf, size_t n) {
  size_t off = 0;
  buf[0] = '\0';
  for (int c = 0; c < RP_MEM_NCAT && off < n; c++) {
    size_t pk = rp_mem_peak(c);
    if (!pk) continue;
    off += snprintf(buf + off, n - off, "%s %.2f MiB, ", cat_names[c], pk / 1048576.0);
  }
  if (off < n)
    snprintf(buf + off, n - off, "total peak %.2f MiB (process peak RSS %.2f MiB)",
             rp_mem_peak_total() / 1048576.0, rp_mem_process_peak_rss() / 1048576.0);
}

/* What the kernel counts for the whole process (arenas, libraries, MPI, stacks),
 * since it started: the check on the accounting above. */
size_t rp_mem_process_peak_rss(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return (size_t)ru.ru_maxrss * 1024;  /* Linux: KiB */
}

/* ---- scratch: workspace a kernel takes per call, kept for the next call.
 * A buffer of 64 KiB or more comes from mmap (numa_alloc_local) and its pages
 * fault in on first touch: for flash attention's per-call tiles that was 11% of
 * a T = 256 forward+backward (perf). Freed scratch blocks wait here, not
 * counted as allocated, for a call that fits in one; the list is short, so a
 * block that does not fit is freed. */
#define SCRATCH_KEEP 8

static pthread_mutex_t scr_mu = PTHREAD_MUTEX_INITIALIZER;
static void *scr_idle[SCRATCH_KEEP]; /* user pointers of idle blocks, or NULL */

static size_t block_room(void *p) {
  block_hdr *h = (block_hdr *)((char *)p - HDR);
  return h->total - HDR;
}

void *rp_scratch_alloc(size_t bytes) {
  void *best = NULL;
  int bi = -1;
  pthread_mutex_lock(&scr_mu);
  for (int i = 0; i < SCRATCH_KEEP; i++)
    if (scr_idle[i] && block_room(scr_idle[i]) >= bytes &&
        (!best || block_room(scr_idle[i]) < block_room(best)))
      best = scr_idle[i], bi = i;
  if (best) scr_idle[bi] = NULL;
  pthread_mutex_unlock(&scr_mu);
  if (!best) return rp_alloc(bytes, RP_MEM_WORKSPACE);
  block_hdr *h = (block_hdr *)((char *)best - HDR);
  h->bytes = bytes;
  h->cat = RP_MEM_WORKSPACE;
  account(RP_MEM_WORKSPACE, bytes, +1);
  memset(best, 0, bytes); /* zero-filled, as rp_alloc promises */
  return best;
}

void rp_scratch_free(void *p) {
  if (!p) return;
  block_hdr *h = (block_hdr *)((char *)p - HDR);
  account(h->cat, h->bytes, -1);
  h->bytes = 0; /* idle: rp_free of it later subtracts nothing */
  pthread_mutex_lock(&scr_mu);
  int slot = -1;
  for (int i = 0; i < SCRATCH_KEEP && slot < 0; i++)
    if (!scr_idle[i]) slot = i;
  if (slot < 0) { /* full: keep the larger of this and the smallest idle block */
    int small = 0;
    for (int i = 1; i < SCRATCH_KEEP; i++)
      if (block_room(scr_idle[i]) < block_room(scr_idle[small])) small = i;
    if (block_room(scr_idle[small]) < block_room(p)) {
      void *old = scr_idle[small];
      scr_idle[small] = p;
      p = old;
    }
    pthread_mutex_unlock(&scr_mu);
    rp_free(p);
    return;
  }
  scr_idle[slot] = p;
  pthread_mutex_unlock(&scr_mu);
}

void rp_scratch_release(void) {
  pthread_mutex_lock(&scr_mu);
  for (int i = 0; i < SCRATCH_KEEP; i++) {
    rp_free(scr_idle[i]);
    scr_idle[i] = NULL;
  }
  pthread_mutex_unlock(&scr_mu);
}
