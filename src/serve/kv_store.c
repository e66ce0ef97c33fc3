/* The persistent K/V block store (rp_serve.h): one file per full block, keyed
 * by a chained hash of the token prefix, written atomically, checked on read. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ringpipe/rp_infer.h"
#include "ringpipe/rp_serve.h"

#define KVS_MAGIC 0x314b4c42564b5052ULL /* "RPKVBLK1" */

typedef struct {
  uint64_t magic, key, layer_bytes;
  uint32_t L, C;
  int32_t tokens[RP_KV_BLOCK];
  uint64_t sums[RP_KVS_MAX_LAYERS];
} kvs_header;
_Static_assert(sizeof(kvs_header) <= RP_KVS_HEADER, "header fits its 4096 bytes");

/* FNV-1a over bytes, continuing from h. */
static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}

/* splitmix64 finaliser: spreads FNV's low-entropy high bits. */
static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

int rp_kvs_keys(const int32_t *tokens, int n, uint64_t *keys) {
  uint64_t h = 0xcbf29ce484222325ULL;
  int nb = n / RP_KV_BLOCK;
  for (int b = 0; b < nb; b++) {
    h = mix64(fnv1a(h, tokens + (size_t)b * RP_KV_BLOCK, RP_KV_BLOCK * sizeof(int32_t)));
    keys[b] = h ? h : 1; /* 0 marks an empty index slot */
  }
  return nb;
}

/* ---- index: an open-addressing set of keys */

static int index_has(const rp_kv_store *s, uint64_t key) {
  for (size_t i = key & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
    if (s->keys[i] == key) return 1;
    if (s->keys[i] == 0) return 0;
  }
}

static int index_add(rp_kv_store *s, uint64_t key);

static int index_grow(rp_kv_store *s) {
  uint64_t *old = s->keys;
  size_t oldcap = s->cap;
  s->cap = oldcap ? oldcap * 2 : 1024;
  s->keys = calloc(s->cap, sizeof *s->keys);
  if (!s->keys) return 0;
  s->count = 0;
  for (size_t i = 0; i < oldcap; i++)
    if (old[i]) index_add(s, old[i]);
  free(old);
  return 1;
}

static int index_add(rp_kv_store *s, uint64_t key) {
  if ((s->count + 1) * 2 > s->cap && !index_grow(s)) return 0;
  size_t i = key & (s->cap - 1);
  while (s->keys[i] && s->keys[i] != key) i = (i + 1) & (s->cap - 1);
  if (!s->keys[i]) {
    s->keys[i] = key;
    s->count++;
  }
  return 1;
}

void rp_kvs_path(const rp_kv_store *s, uint64_t key, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/%016llx.kvb", s->dir, (unsigned long long)key);
}

/* Adds every <16 hex>.kvb of the directory to the index (files of other
 * processes too; their contents are checked when read). */
static rp_status index_scan(rp_kv_store *s) {
  DIR *d = opendir(s->dir);
  if (!d) return rp_err(RP_EIO, "cannot open the KV store directory %s: %s", s->dir, strerror(errno));
  struct dirent *e;
  while ((e = readdir(d))) {
    char *end;
    if (strlen(e->d_name) != 20 || strcmp(e->d_name + 16, ".kvb") != 0) continue;
    uint64_t key = strtoull(e->d_name, &end, 16);
    if (end == e->d_name + 16 && key && !index_add(s, key)) {
      closedir(d);
      return rp_err(RP_ENOMEM, "out of memory for the KV store index");
    }
  }
  closedir(d);
  return RP_OK;
}

rp_status rp_kvs_open(rp_kv_store *s, const char *dir, int L, int C) {
  memset(s, 0, sizeof *s);
  if (L < 1 || L > RP_KVS_MAX_LAYERS || C < 1)
    return rp_err(RP_EINVAL, "KV store for %d layers x %d channels: need 1..%d layers", L, C,
                  RP_KVS_MAX_LAYERS);
  if (snprintf(s->dir, sizeof s->dir, "%s", dir) >= (int)sizeof s->dir)
    return rp_err(RP_EINVAL, "KV store path too long: %s", dir);
  if (mkdir(dir, 0755) != 0 && errno != EEXIST)
    return rp_err(RP_EIO, "cannot create the KV store directory %s: %s", dir, strerror(errno));
  s->L = L;
  s->C = C;
  s->layer_bytes = (size_t)2 * RP_KV_BLOCK * C * sizeof(float);
  if (!index_grow(s)) return rp_err(RP_ENOMEM, "out of memory for the KV store index");
  return index_scan(s);
}

void rp_kvs_close(rp_kv_store *s) {
  free(s->keys);
  free(s->hcache);
  memset(s, 0, sizeof *s);
}

int rp_kvs_longest_prefix(rp_kv_store *s, const uint64_t *keys, int nkeys, int rescan) {
  if (rescan) index_scan(s); /* a failed rescan leaves the index as it was */
  int n = 0;
  while (n < nkeys && index_has(s, keys[n])) n++;
  return n;
}

static int write_all(int fd, const void *p, size_t n) {
  const char *b = p;
  while (n) {
    ssize_t w = write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return 0;
    b += w;
    n -= (size_t)w;
  }
  return 1;
}

static kvs_header *cached_header(rp_kv_store *s, uint64_t key);

void rp_kvs_drop(rp_kv_store *s, uint64_t key) {
  kvs_header *h = cached_header(s, key);
  if (h) h->magic = 0;
  char path[600];
  rp_kvs_path(s, key, path, sizeof path);
  unlink(path);
}

rp_status rp_kvs_put(rp_kv_store *s, uint64_t key, const int32_t *tokens64, const float *block) {
  char path[600];
  rp_kvs_path(s, key, path, sizeof path);
  /* the index may know a block that a reader found damaged and dropped */
  if (index_has(s, key) && access(path, F_OK) == 0) return RP_OK;
  kvs_header *h = calloc(1, RP_KVS_HEADER);
  if (!h) return rp_err(RP_ENOMEM, "out of memory writing a KV block");
  h->magic = KVS_MAGIC;
  h->key = key;
  h->layer_bytes = s->layer_bytes;
  h->L = (uint32_t)s->L;
  h->C = (uint32_t)s->C;
  memcpy(h->tokens, tokens64, sizeof h->tokens);
  for (int l = 0; l < s->L; l++)
    h->sums[l] = fnv1a(0xcbf29ce484222325ULL, (const char *)block + l * s->layer_bytes,
                       s->layer_bytes);
  /* a name of our own (pid + an address-derived counter), then rename: readers
   * see the old name absent or the whole file, and the last of several
   * writers of identical content wins */
  static _Atomic unsigned long seq;
  char tmp[640];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%lu", path, (long)getpid(), (unsigned long)seq++);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int ok = fd >= 0 && write_all(fd, h, RP_KVS_HEADER) &&
           write_all(fd, block, (size_t)s->L * s->layer_bytes);
  if (fd >= 0) ok = (close(fd) == 0) && ok;
  free(h);
  if (!ok || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return rp_err(RP_EIO, "cannot write KV block %s: %s", path, strerror(e));
  }
  if (!index_add(s, key)) return rp_err(RP_ENOMEM, "out of memory for the KV store index");
  return RP_OK;
}

/* Opens for reading with O_DIRECT where the file system allows it (tmpfs does
 * not); otherwise the page cache is dropped after each read so that a read
 * goes to the device, when permitted. */
static int open_for_read(rp_kv_store *s, const char *path) {
  if (!s->direct_tried || s->direct) {
    int fd = open(path, O_RDONLY | O_DIRECT);
    if (fd >= 0 || errno != EINVAL) {
      if (!s->direct_tried && fd >= 0) s->direct = 1;
      s->direct_tried = 1;
      return fd;
    }
    s->direct_tried = 1;
    s->direct = 0;
  }
  return open(path, O_RDONLY);
}

static ssize_t pread_all(int fd, void *p, size_t n, off_t off) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = pread(fd, (char *)p + done, n - done, off + (off_t)done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += (size_t)r;
  }
  return (ssize_t)done;
}

/* O_DIRECT needs aligned buffers: read through one, then copy. */
static void *aligned_buf(size_t n) {
  void *p = NULL;
  return posix_memalign(&p, 4096, n) == 0 ? p : NULL;
}

static rp_status check_header(const rp_kv_store *s, const kvs_header *h, uint64_t key,
                              const int32_t *tokens64, const char *path) {
  if (h->magic != KVS_MAGIC || h->key != key || h->L != (uint32_t)s->L ||
      h->C != (uint32_t)s->C || h->layer_bytes != s->layer_bytes)
    return rp_err(RP_EFORMAT, "KV block %s: bad header (not a block of this model)", path);
  if (tokens64 && memcmp(h->tokens, tokens64, sizeof h->tokens) != 0)
    return rp_err(RP_EFORMAT, "KV block %s: its tokens differ from the prompt's (hash collision)",
                  path);
  return RP_OK;
}

static rp_status read_layers(rp_kv_store *s, int fd, const kvs_header *h, int l0, int nl,
                             float *dst, const char *path, size_t *bytes_read) {
  size_t n = (size_t)nl * s->layer_bytes;
  char *buf = aligned_buf(n);
  if (!buf) return rp_err(RP_ENOMEM, "out of memory reading a KV block");
  ssize_t r = pread_all(fd, buf, n, RP_KVS_HEADER + (off_t)l0 * (off_t)s->layer_bytes);
  *bytes_read += r > 0 ? (size_t)r : 0;
  rp_status st = RP_OK;
  if (r != (ssize_t)n)
    st = rp_err(RP_EFORMAT, "KV block %s is truncated (layer %d)", path, l0);
  for (int l = 0; st == RP_OK && l < nl; l++)
    if (fnv1a(0xcbf29ce484222325ULL, buf + l * s->layer_bytes, s->layer_bytes) != h->sums[l0 + l])
      st = rp_err(RP_EFORMAT, "KV block %s: layer %d fails its checksum", path, l0 + l);
  if (st == RP_OK) memcpy(dst, buf, n);
  free(buf);
  return st;
}

/* Headers checked by a layer read are remembered (a few, by key), so that
 * reading a block layer by layer reads its header once: blocks are immutable
 * and the per-layer checksums still catch damaged data. */
static kvs_header *cached_header(rp_kv_store *s, uint64_t key) {
  if (!s->hcache) return NULL;
  kvs_header *h = (kvs_header *)((char *)s->hcache + (key % RP_KVS_HCACHE) * RP_KVS_HEADER);
  return h->magic == KVS_MAGIC && h->key == key ? h : NULL;
}

static void remember_header(rp_kv_store *s, const kvs_header *h) {
  if (!s->hcache && posix_memalign(&s->hcache, 4096, (size_t)RP_KVS_HCACHE * RP_KVS_HEADER) == 0)
    memset(s->hcache, 0, (size_t)RP_KVS_HCACHE * RP_KVS_HEADER);
  if (s->hcache) memcpy((char *)s->hcache + (h->key % RP_KVS_HCACHE) * RP_KVS_HEADER, h, RP_KVS_HEADER);
}

rp_status rp_kvs_read(rp_kv_store *s, uint64_t key, const int32_t *tokens64, int layer,
                      float *dst, size_t *bytes_read) {
  char path[600];
  rp_kvs_path(s, key, path, sizeof path);
  *bytes_read = 0;
  if (layer >= s->L) return rp_err(RP_EINVAL, "KV block read of layer %d of %d", layer, s->L);
  int fd = open_for_read(s, path);
  if (fd < 0) return rp_err(RP_EIO, "KV block %s: %s", path, strerror(errno));
  kvs_header *h = aligned_buf(RP_KVS_HEADER), *known = layer > 0 ? cached_header(s, key) : NULL;
  rp_status st = h ? RP_OK : rp_err(RP_ENOMEM, "out of memory reading a KV block");
  if (st == RP_OK && known) {
    memcpy(h, known, RP_KVS_HEADER);
    st = check_header(s, h, key, tokens64, path);
  } else if (st == RP_OK) {
    ssize_t r = pread_all(fd, h, RP_KVS_HEADER, 0);
    *bytes_read += r > 0 ? (size_t)r : 0;
    st = r == RP_KVS_HEADER ? check_header(s, h, key, tokens64, path)
                            : rp_err(RP_EFORMAT, "KV block %s is truncated (header)", path);
  }
  if (st == RP_OK && layer >= 0 && !known) remember_header(s, h);
  if (st == RP_OK)
    st = read_layers(s, fd, h, layer < 0 ? 0 : layer, layer < 0 ? s->L : 1, dst, path, bytes_read);
  if (!s->direct) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
  free(h);
  return st;
}
