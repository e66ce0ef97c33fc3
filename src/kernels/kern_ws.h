/* A packing workspace shared by the calls of one GEMM family (fp32 in
 * sgemm.c, bf16 in gemm_bf16.c): one buffer kept between calls that grows as
 * needed, used by one GEMM at a time per process (pools running side by side
 * take turns on its mutex). */
#ifndef RP_KERN_WS_H
#define RP_KERN_WS_H

#include <pthread.h>
#include <stddef.h>

typedef struct {
  const char *what; /* for the out-of-memory message */
  pthread_mutex_t mu;
  char *buf;
  size_t cap;
} rp_kern_ws;

#define RP_KERN_WS_INIT(name) {(name), PTHREAD_MUTEX_INITIALIZER, NULL, 0}

/* Locks ws and returns at least `bytes` bytes (accounted workspace); fatal
 * when they cannot be allocated. */
char *rp_kern_ws_acquire(rp_kern_ws *ws, size_t bytes);
void rp_kern_ws_release(rp_kern_ws *ws);
/* Frees the buffer (the next acquire allocates again). */
void rp_kern_ws_free(rp_kern_ws *ws);

#endif
