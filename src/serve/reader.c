/* The storage reader thread (serve_internal.h): reads a request's hit blocks
 * from the store through the node's storage link while the compute thread
 * runs. Layer-wise it reads layer 0 of every block, then layer 1, ..., so
 * that layer l is complete while layer l + 1 is still on the wire; otherwise
 * it reads each block whole. A block failing a check (missing, truncated,
 * corrupt) ends the valid prefix there: later blocks are not used. */
#include <stdlib.h>
#include <string.h>

#include "serve_internal.h"

double serve_now(void) { return (double)rp_now_ns() * 1e-9; }

/* Bytes a read puts on the storage link: the header comes with a block's
 * first read (layer 0, or the whole block), then only layers. */
static size_t expected_bytes(const rp_kv_store *st, int layer) {
  if (layer < 0) return RP_KVS_HEADER + (size_t)st->L * st->layer_bytes;
  return st->layer_bytes + (layer == 0 ? RP_KVS_HEADER : 0);
}

static void read_one(reader *r, read_job *j, int b, int layer) {
  size_t floats = (size_t)r->store->L * r->store->layer_bytes / sizeof(float), got = 0;
  float *dst = j->staging + (size_t)b * floats +
               (layer < 0 ? 0 : (size_t)layer * r->store->layer_bytes / sizeof(float));
  size_t want = expected_bytes(r->store, layer);
  /* the link time is claimed first and the file is read meanwhile: a read
   * takes max(its own time, its bytes at the link's rate) */
  uint64_t end = 0;
  if (j->link) {
    rp_link_enqueue(j->link, want);
    end = rp_link_reserve(j->link, want);
  }
  rp_status s = rp_kvs_read(r->store, j->keys[b], j->tokens + (size_t)b * RP_KV_BLOCK, layer, dst,
                            &got);
  if (j->link) {
    if (got > want) rp_link_send(j->link, got - want); /* a header read again */
    rp_link_wait(end);
    rp_link_dequeue(j->link, want);
  }
  if (s == RP_EFORMAT && !strstr(rp_errmsg(), "collision")) rp_kvs_drop(r->store, j->keys[b]);
  pthread_mutex_lock(&r->mu);
  j->bytes += got;
  if (s != RP_OK && b < j->nvalid) {
    rp_warn("KV block %d treated as a miss: %s", b, rp_errmsg());
    j->nvalid = b;
  }
  pthread_mutex_unlock(&r->mu);
}

static void publish(reader *r, read_job *j, int layers, int done) {
  pthread_mutex_lock(&r->mu);
  j->layers_done = layers;
  if (done) {
    j->done = 1;
    j->t1 = serve_now();
  }
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

static void run_job(reader *r, read_job *j) {
  j->t0 = serve_now();
  if (j->layerwise) {
    for (int l = 0; l < r->L; l++) {
      for (int b = 0; b < j->nvalid; b++) read_one(r, j, b, l);
      publish(r, j, l + 1, l + 1 == r->L);
    }
  } else {
    for (int b = 0; b < j->nvalid; b++) read_one(r, j, b, -1);
    publish(r, j, r->L, 1);
  }
}

static void *reader_main(void *arg) {
  reader *r = arg;
  pthread_mutex_lock(&r->mu);
  for (;;) {
    while (!r->head && !r->stop) pthread_cond_wait(&r->cv, &r->mu);
    if (!r->head) break;
    read_job *j = r->head;
    r->head = j->next;
    if (!r->head) r->tail = NULL;
    pthread_mutex_unlock(&r->mu);
    run_job(r, j);
    pthread_mutex_lock(&r->mu);
  }
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

rp_status reader_start(reader *r, rp_kv_store *store, int L) {
  memset(r, 0, sizeof *r);
  r->store = store;
  r->L = L;
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  if (pthread_create(&r->th, NULL, reader_main, r) != 0)
    return rp_err(RP_EINTERNAL, "cannot start the storage reader thread");
  r->started = 1;
  return RP_OK;
}

void reader_stop(reader *r) {
  if (!r->started) return;
  pthread_mutex_lock(&r->mu);
  r->stop = 1;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  pthread_join(r->th, NULL);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
  r->started = 0;
}

void reader_submit(reader *r, read_job *j) {
  j->layers_done = 0;
  j->nvalid = j->nblocks;
  j->done = 0;
  j->bytes = 0;
  j->next = NULL;
  pthread_mutex_lock(&r->mu);
  if (r->tail) r->tail->next = j;
  else r->head = j;
  r->tail = j;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

int reader_wait(reader *r, read_job *j, int layer) {
  pthread_mutex_lock(&r->mu);
  while (j->layers_done <= layer) pthread_cond_wait(&r->cv, &r->mu);
  int v = j->nvalid;
  pthread_mutex_unlock(&r->mu);
  return v;
}

int reader_poll_layers(reader *r, read_job *j, int *nvalid) {
  pthread_mutex_lock(&r->mu);
  int l = j->layers_done;
  *nvalid = j->nvalid;
  pthread_mutex_unlock(&r->mu);
  return l;
}

void tl_add(tl_log *l, const char *name, double t0, double t1) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 256;
    tl_event *g = realloc(l->ev, (size_t)cap * sizeof *g);
    if (!g) return; /* the timeline is best effort; the run goes on */
    l->ev = g;
    l->cap = cap;
  }
  tl_event *e = &l->ev[l->n++];
  snprintf(e->name, sizeof e->name, "%s", name);
  e->t0 = t0;
  e->t1 = t1;
}
