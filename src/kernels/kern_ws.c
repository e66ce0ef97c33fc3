/* The shared packing workspace of the GEMM drivers (kern_ws.h). */
#include "kern_ws.h"

#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_base.h"

char *rp_kern_ws_acquire(rp_kern_ws *ws, size_t bytes) {
  pthread_mutex_lock(&ws->mu);
  if (bytes > ws->cap) {
    rp_free(ws->buf);
    ws->cap = bytes + bytes / 4; /* room to grow without reallocating at once */
    ws->buf = rp_alloc(ws->cap, RP_MEM_WORKSPACE);
    if (!ws->buf) rp_fatal("%s: cannot allocate %zu bytes of workspace", ws->what, ws->cap);
  }
  return ws->buf;
}

void rp_kern_ws_release(rp_kern_ws *ws) { pthread_mutex_unlock(&ws->mu); }

void rp_kern_ws_free(rp_kern_ws *ws) {
  pthread_mutex_lock(&ws->mu);
  rp_free(ws->buf);
  ws->buf = NULL;
  ws->cap = 0;
  pthread_mutex_unlock(&ws->mu);
}
