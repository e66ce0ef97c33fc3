/* Streaming batch loader over token shards (see rp_data.h for the stream). */
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <glob.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io_fs.h"
#include "io/loader_internal.h"
#include "ringpipe/rp_data.h"
#include "ringpipe/rp_json.h"

/* ---- per-epoch permutation of [0, W): a keyed Feistel network on the
 * smallest even-bit domain >= W with cycle walking. It needs no memory, gives
 * random access (so a resume point is just a counter) and is a bijection. */

static uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static uint64_t permute(uint64_t x, uint64_t W, uint64_t seed, uint64_t epoch) {
  int h = 1;
  while (h < 32 && (1ull << (2 * h)) < W) h++;
  uint64_t mask = (1ull << h) - 1, key = mix64(seed ^ mix64(epoch + 0x5EEDull));
  do {
    uint64_t L = x >> h, R = x & mask;
    for (uint64_t r = 0; r < 6; r++) {
      uint64_t f = mix64(key ^ (r << 56) ^ R) & mask;
      uint64_t nl = R;
      R = L ^ f;
      L = nl;
    }
    x = (L << h) | R;
  } while (x >= W);
  return x;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_list(char **v, int n) {
  for (int i = 0; i < n; i++) free(v[i]);
  free(v);
}

/* Sorted list of shard paths for `data` (directory, glob or file). */
static rp_status list_files(const char *data, const char *split, char ***out, int *n) {
  char **v = NULL;
  int cnt = 0;
  *out = NULL;
  *n = 0;
  if (strpbrk(data, "*?[")) {
    glob_t g;
    int r = glob(data, 0, NULL, &g);
    if (r == GLOB_NOMATCH || (r == 0 && g.gl_pathc == 0)) {
      if (r == 0) globfree(&g);
      return rp_err(RP_EIO, "no files match the data pattern '%s'", data);
    }
    if (r != 0) return rp_err(RP_EIO, "cannot expand the data pattern '%s'", data);
    v = calloc(g.gl_pathc, sizeof *v);
    for (size_t i = 0; v && i < g.gl_pathc; i++) v[cnt++] = strdup(g.gl_pathv[i]);
    globfree(&g);
  } else if (rp_io_is_dir(data)) {
    if (!split || !*split)
      return rp_err(RP_EINVAL, "a data directory needs a split name (\"train\" or \"val\")");
    char pat[300];
    snprintf(pat, sizeof pat, "*%s*.bin", split);
    DIR *d = opendir(data);
    if (!d) return rp_err(RP_EIO, "cannot read data directory '%s': %s", data, strerror(errno));
    struct dirent *e;
    int cap = 0;
    while ((e = readdir(d))) {
      if (fnmatch(pat, e->d_name, 0) != 0) continue;
      if (cnt == cap) {
        cap = cap ? 2 * cap : 16;
        char **nv = realloc(v, cap * sizeof *v);
        if (!nv) break;
        v = nv;
      }
      size_t l = strlen(data) + strlen(e->d_name) + 2;
      v[cnt] = malloc(l);
      if (v[cnt]) snprintf(v[cnt], l, "%s/%s", data, e->d_name);
      cnt++;
    }
    closedir(d);
    if (cnt == 0) {
      free(v);
      return rp_err(RP_EIO, "data directory '%s' has no files matching %s; create them with "
                    "`ringpipe prepare --text FILE --out %s`", data, pat, data);
    }
  } else if (rp_io_exists(data)) {
    v = calloc(1, sizeof *v);
    if (v) v[cnt++] = strdup(data);
  } else {
    return rp_err(RP_EIO, "data path '%s' does not exist; point --data at a directory of .bin "
                  "shards (see `ringpipe prepare`)", data);
  }
  if (!v) return rp_err(RP_ENOMEM, "out of memory listing data files");
  for (int i = 0; i < cnt; i++)
    if (!v[i]) {
      free_list(v, cnt);
      return rp_err(RP_ENOMEM, "out of memory listing data files");
    }
  qsort(v, cnt, sizeof *v, cmp_str);
  *out = v;
  *n = cnt;
  return RP_OK;
}

rp_status rp_loader_open(rp_loader **out, const char *data, const char *split, int B, int T,
                         int file_order, uint64_t seed, int rank, int nranks) {
  *out = NULL;
  if (B < 1 || T < 1 || (uint64_t)B * T + 1 > RP_SHARD_MAX_TOKENS)
    return rp_err(RP_EINVAL, "loader batch B=%d x T=%d is invalid; both must be >= 1", B, T);
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return rp_err(RP_EINVAL, "loader rank %d of %d is invalid", rank, nranks);
  char **files;
  int nf;
  RP_TRY(list_files(data, split, &files, &nf));
  rp_loader *l = calloc(1, sizeof *l);
  rp_status s = RP_OK;
  if (l) {
    l->shards = calloc(nf, sizeof *l->shards);
    l->win_start = calloc(nf + 1, sizeof *l->win_start);
    l->buf = malloc(((size_t)B * T + 1) * sizeof *l->buf);
  }
  if (!l || !l->shards || !l->win_start || !l->buf) {
    free_list(files, nf);
    rp_loader_close(l);
    return rp_err(RP_ENOMEM, "out of memory opening the loader");
  }
  l->B = B;
  l->T = T;
  l->file_order = file_order ? 1 : 0;
  l->seed = seed;
  l->rank = rank;
  l->nranks = nranks;
  size_t BT = (size_t)B * T, largest = 0;
  for (int i = 0; i < nf; i++) l->shards[i].fd = -1;
  for (int i = 0; i < nf && s == RP_OK; i++) {
    s = rp_shard_open(&l->shards[i], files[i]);
    if (s != RP_OK) break;
    l->nfiles = i + 1;
    size_t n = l->shards[i].num_tokens;
    l->total_tokens += n;
    largest = RP_MAX(largest, n);
    l->win_start[i + 1] = l->win_start[i] + (n > 0 ? (n - 1) / BT : 0);
  }
  free_list(files, nf);
  if (s == RP_OK) {
    l->W = l->win_start[nf];
    if (l->W == 0)
      s = rp_err(RP_EINVAL, "no shard of '%s' holds one batch: B*T+1 = %zu tokens are needed and "
                 "the largest shard has %zu; lower --batch or --seq, or prepare more text", data,
                 BT + 1, largest);
  }
  if (s != RP_OK) {
    rp_loader_close(l);
    return s;
  }
  *out = l;
  return RP_OK;
}

void rp_loader_close(rp_loader *l) {
  if (!l) return;
  rp_loader_pack_free(l);
  for (int i = 0; i < l->nfiles; i++) rp_shard_close(&l->shards[i]);
  free(l->shards);
  free(l->win_start);
  free(l->buf);
  free(l);
}

uint64_t rp_loader_take_window(rp_loader *l) {
  uint64_t g = l->next_global + (uint64_t)l->rank;
  uint64_t epoch = g / l->W, p = g % l->W;
  l->next_global += (uint64_t)l->nranks;
  return l->file_order ? p : permute(p, l->W, l->seed, epoch);
}

rp_status rp_loader_next(rp_loader *l, int32_t *inputs, int32_t *targets) {
  if (l->packed)
    return rp_err(RP_EINTERNAL, "a packed loader hands out batches with rp_loader_next_packed");
  uint64_t w = rp_loader_take_window(l);
  /* shard holding window w: last s with win_start[s] <= w */
  int lo = 0, hi = l->nfiles - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (l->win_start[mid] <= w)
      lo = mid;
    else
      hi = mid - 1;
  }
  const rp_shard *sh = &l->shards[lo];
  size_t BT = (size_t)l->B * l->T, first = (size_t)(w - l->win_start[lo]) * BT;
  RP_TRY(rp_shard_read(sh, first, BT + 1, l->buf));
  RP_TRY(rp_shard_check_ids(sh, l->buf, BT + 1, first, l->V));  /* the file may have changed */
  for (size_t i = 0; i < BT; i++) {
    inputs[i] = l->buf[i];
    targets[i] = l->buf[i + 1];
  }
  return RP_OK;
}

void rp_loader_state(const rp_loader *l, rp_loader_snapshot *st) {
  memset(st, 0, sizeof *st);
  st->next_window = l->next_global;
  st->epoch = l->next_global / l->W;
  st->seed = l->seed;
  st->num_windows = l->W;
  st->B = l->B;
  st->T = l->T;
  st->file_order = l->file_order;
}

rp_status rp_loader_set_state(rp_loader *l, const rp_loader_snapshot *st) {
  if (st->B != l->B || st->T != l->T)
    return rp_err(RP_EINVAL, "the saved loader used batches of B=%d x T=%d but this run uses "
                  "B=%d x T=%d; resume with the same --batch and --seq", st->B, st->T, l->B, l->T);
  if (st->file_order != l->file_order)
    return rp_err(RP_EINVAL, "the saved loader read data in %s order but this run reads it in %s "
                  "order; resume with the same data-order option", st->file_order ? "file" :
                  "shuffled", l->file_order ? "file" : "shuffled");
  if (st->num_windows != l->W)
    return rp_err(RP_EINVAL, "the saved loader saw %" PRIu64 " batches per epoch but this data "
                  "has %" PRIu64 "; resume on the same --data", st->num_windows, l->W);
  if (!l->file_order && st->seed != l->seed)
    return rp_err(RP_EINVAL, "the saved loader shuffled with seed %" PRIu64 " but this run uses "
                  "%" PRIu64 "; resume with the same --seed", st->seed, l->seed);
  l->next_global = st->next_window;
  return RP_OK;
}

void rp_loader_reset(rp_loader *l) { l->next_global = 0; }
rp_status rp_loader_set_vocab(rp_loader *l, int V) {
  for (int i = 0; i < l->nfiles; i++) RP_TRY(rp_shard_check_vocab(&l->shards[i], V));
  l->V = V;
  return RP_OK;
}
size_t rp_loader_num_tokens(const rp_loader *l) { return l->total_tokens; }
uint64_t rp_loader_num_windows(const rp_loader *l) { return l->W; }
int rp_loader_num_files(const rp_loader *l) { return l->nfiles; }
uint64_t rp_loader_epoch(const rp_loader *l) { return (l->next_global + l->rank) / l->W; }

rp_status rp_loader_snapshot_to_json(const rp_loader_snapshot *st, char *buf, size_t cap) {
  int n = snprintf(buf, cap,
                   "{\"next_window\":%" PRIu64 ",\"epoch\":%" PRIu64 ",\"seed\":%" PRIu64
                   ",\"num_windows\":%" PRIu64 ",\"B\":%d,\"T\":%d,\"file_order\":%d}",
                   st->next_window, st->epoch, st->seed, st->num_windows, st->B, st->T,
                   st->file_order);
  if (n < 0 || (size_t)n >= cap)
    return rp_err(RP_EINVAL, "loader JSON needs %d bytes; the buffer holds %zu", n + 1, cap);
  return RP_OK;
}

rp_status rp_loader_snapshot_from_json(const char *json, const char *path, rp_loader_snapshot *st) {
  char key[256];
  const char *pre = path && *path ? path : "";
  const char *dot = *pre ? "." : "";
  int64_t v;
  memset(st, 0, sizeof *st);
#define U64(field)                                                        \
  snprintf(key, sizeof key, "%s%s%s", pre, dot, #field);                  \
  RP_TRY(rp_json_get_u64(json, key, &st->field))
#define I32(field)                                                        \
  snprintf(key, sizeof key, "%s%s%s", pre, dot, #field);                  \
  RP_TRY(rp_json_get_int_in(json, key, 0, INT32_MAX, &v));                \
  st->field = (int32_t)v
  U64(next_window);
  U64(epoch);
  U64(seed);
  U64(num_windows);
  I32(B);
  I32(T);
  I32(file_order);
#undef U64
#undef I32
  return RP_OK;
}
