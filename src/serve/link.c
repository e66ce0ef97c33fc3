/* Rate-limited links (rp_serve.h): a storage NIC or a compute link shared by
 * the processes of a node. The state is a few counters in a shared-memory
 * file, updated with atomics so that no process needs a lock: a sender
 * claims the interval [max(now, next_free), + n / rate) by compare-and-swap,
 * then sleeps until its end. That is a token bucket whose depth is the
 * sender's own message: bytes never go faster than the rate, and a link with
 * work queued is busy all the time. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ringpipe/rp_serve.h"

uint64_t rp_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

rp_status rp_link_open(rp_link *k, const char *name, double gbps, int create) {
  memset(k, 0, sizeof *k);
  snprintf(k->path, sizeof k->path, "/dev/shm/ringpipe-link-%s", name);
  int fd = open(k->path, O_RDWR | (create ? O_CREAT | O_TRUNC : 0), 0600);
  if (fd < 0) return rp_err(RP_EIO, "cannot open the link state %s: %s", k->path, strerror(errno));
  if (create && ftruncate(fd, sizeof(rp_link_state)) != 0) {
    close(fd);
    return rp_err(RP_EIO, "cannot size the link state %s: %s", k->path, strerror(errno));
  }
  void *p = mmap(NULL, sizeof(rp_link_state), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED)
    return rp_err(RP_EIO, "cannot map the link state %s: %s", k->path, strerror(errno));
  k->st = p;
  k->owner = create;
  k->bytes_per_s = gbps > 0 ? gbps * 1e9 / 8 : 0;
  return RP_OK;
}

void rp_link_close(rp_link *k) {
  if (k->st) munmap(k->st, sizeof(rp_link_state));
  if (k->owner) unlink(k->path);
  memset(k, 0, sizeof *k);
}

static void sleep_until_ns(uint64_t t) {
  for (;;) {
    uint64_t now = rp_now_ns();
    if (now >= t) return;
    uint64_t d = t - now;
    struct timespec ts = {(time_t)(d / 1000000000ULL), (long)(d % 1000000000ULL)};
    nanosleep(&ts, NULL);
  }
}

uint64_t rp_link_reserve(rp_link *k, size_t n) {
  rp_link_state *st = k->st;
  __atomic_add_fetch(&st->bytes, (uint64_t)n, __ATOMIC_RELAXED);
  __atomic_add_fetch(&st->ops, 1, __ATOMIC_RELAXED);
  if (k->bytes_per_s <= 0) return 0;
  uint64_t dur = (uint64_t)((double)n / k->bytes_per_s * 1e9);
  uint64_t old = __atomic_load_n(&st->next_free_ns, __ATOMIC_ACQUIRE), end;
  do {
    uint64_t now = rp_now_ns(), start = old > now ? old : now;
    end = start + dur;
  } while (!__atomic_compare_exchange_n(&st->next_free_ns, &old, end, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE));
  __atomic_add_fetch(&st->busy_ns, dur, __ATOMIC_RELAXED);
  return end;
}

void rp_link_wait(uint64_t end) { sleep_until_ns(end); }

void rp_link_send(rp_link *k, size_t n) { sleep_until_ns(rp_link_reserve(k, n)); }

void rp_link_enqueue(rp_link *k, size_t n) {
  __atomic_add_fetch(&k->st->queued_bytes, (uint64_t)n, __ATOMIC_RELAXED);
}

void rp_link_dequeue(rp_link *k, size_t n) {
  __atomic_sub_fetch(&k->st->queued_bytes, (uint64_t)n, __ATOMIC_RELAXED);
}

double rp_link_busy_s(const rp_link *k) {
  return (double)__atomic_load_n(&k->st->busy_ns, __ATOMIC_RELAXED) * 1e-9;
}

uint64_t rp_link_bytes(const rp_link *k) {
  return __atomic_load_n(&k->st->bytes, __ATOMIC_RELAXED);
}
