/* safetensors: a validating reader (pread per tensor, nothing mapped whole) and
 * an F32 writer with on-the-fly transposition. Format: see rp_checkpoint.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/io_fs.h"
#include "io/io_st.h"
#include "ringpipe/rp_checkpoint.h"
#include "ringpipe/rp_json.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; ringpipe's raw reads assume a little-endian host"
#endif

#define ST_MAX_HEADER (100u << 20)  /* the reference implementation's limit */
#define ST_TRANSPOSE_ROWS 64        /* file rows gathered per write/read block */
#define ST_MAX_INT ((uint64_t)1 << 53) /* largest shape or offset read (JSON's exact range) */

/* ---- writer */

typedef struct {
  char *s;
  size_t len, cap;
  int oom;
} strbuf;

static void sb_add(strbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t nc = (b->cap ? b->cap * 2 : 4096);
    while (nc < b->len + n + 1) nc *= 2;
    char *ns = realloc(b->s, nc);
    if (!ns) {
      b->oom = 1;
      return;
    }
    b->s = ns;
    b->cap = nc;
  }
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = '\0';
}

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0) sb_add(b, tmp, (size_t)RP_MIN((size_t)n, sizeof tmp - 1));
}

static uint64_t numel_of(const rp_st_wtensor *t) {
  uint64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= (uint64_t)t->shape[d];
  return n;
}

/* Writes t's bytes, transposing block-wise if asked. */
static rp_status write_data(rp_io_afile *f, const rp_st_wtensor *t, float *blk) {
  uint64_t n = numel_of(t);
  if (!t->transpose) return rp_io_afile_write(f, t->data, n * sizeof(float));
  size_t R = (size_t)t->shape[0], Cn = (size_t)t->shape[1];  /* file [R, Cn] = src^T, src [Cn, R] */
  for (size_t r0 = 0; r0 < R; r0 += ST_TRANSPOSE_ROWS) {
    size_t nr = RP_MIN((size_t)ST_TRANSPOSE_ROWS, R - r0);
    for (size_t c = 0; c < Cn; c++) {
      const float *src = t->data + c * R + r0;
      for (size_t r = 0; r < nr; r++) blk[r * Cn + c] = src[r];
    }
    RP_TRY(rp_io_afile_write(f, blk, nr * Cn * sizeof(float)));
  }
  return RP_OK;
}

rp_status rp_st_write(const char *path, const rp_st_wtensor *t, int n, const char *metadata_json) {
  strbuf h = {0};
  uint64_t off = 0;
  size_t max_cols = 0;
  sb_add(&h, "{", 1);
  if (metadata_json) {
    sb_add(&h, "\"__metadata__\":", 15);
    sb_add(&h, metadata_json, strlen(metadata_json));
  }
  for (int i = 0; i < n; i++) {
    char key[300];
    rp_json_escape(key, sizeof key, t[i].name);
    uint64_t bytes = numel_of(&t[i]) * sizeof(float);
    sb_printf(&h, "%s%s:{\"dtype\":\"F32\",\"shape\":[", (i || metadata_json) ? "," : "", key);
    for (int d = 0; d < t[i].ndim; d++) sb_printf(&h, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
    sb_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
              (unsigned long long)(off + bytes));
    off += bytes;
    if (t[i].transpose) max_cols = RP_MAX(max_cols, (size_t)t[i].shape[1]);
  }
  sb_add(&h, "}", 1);
  while (!h.oom && h.len % 8) sb_add(&h, " ", 1);  /* spec: pad with spaces to 8 bytes */
  if (h.oom) {
    free(h.s);
    return rp_err(RP_ENOMEM, "out of memory building the header of '%s'", path);
  }
  rp_status s = rp_json_validate(h.s);
  if (s != RP_OK) {
    free(h.s);
    return rp_err(RP_EINTERNAL, "safetensors header for '%s' is not valid JSON (bad metadata?)",
                  path);
  }
  float *blk = NULL;
  if (max_cols) {
    blk = malloc(ST_TRANSPOSE_ROWS * max_cols * sizeof(float));
    if (!blk) {
      free(h.s);
      return rp_err(RP_ENOMEM, "out of memory writing '%s'", path);
    }
  }
  rp_io_afile f;
  s = rp_io_afile_open(&f, path);
  if (s == RP_OK) {
    unsigned char le[8];
    for (int b = 0; b < 8; b++) le[b] = (unsigned char)((uint64_t)h.len >> (8 * b));
    s = rp_io_afile_write(&f, le, 8);
    if (s == RP_OK) s = rp_io_afile_write(&f, h.s, h.len);
    for (int i = 0; i < n && s == RP_OK; i++) s = write_data(&f, &t[i], blk);
    if (s == RP_OK)
      s = rp_io_afile_commit(&f);
    else
      rp_io_afile_abort(&f);
  }
  free(blk);
  free(h.s);
  return s;
}

/* ---- reader */

static int dtype_size(const char *d) {
  static const struct {
    const char *name;
    int size;
  } tab[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4},
             {"I16", 2}, {"I8", 1},  {"U64", 8}, {"U32", 4},  {"U16", 2}, {"U8", 1},
             {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
    if (!strcmp(tab[i].name, d)) return tab[i].size;
  return 0;
}

static int cmp_entry(const void *a, const void *b) {
  return strcmp(((const rp_st_entry *)a)->name, ((const rp_st_entry *)b)->name);
}

/* Parses one tensor entry (the value text `v` of member `key`). */
static rp_status parse_entry(rp_st_entry *e, const char *key, const char *v, const rp_st_file *f) {
  rp_json_iter it;
  char k[64], tmp[64];
  const char *x;
  size_t xl;
  int r, have = 0;
  memset(e, 0, sizeof *e);
  snprintf(e->name, sizeof e->name, "%s", key);
  if (rp_json_iter_begin(&it, v) != RP_OK || it.close != '}')
    return rp_err(RP_EFORMAT, "'%s': entry '%s' is not an object", f->path, key);
  while ((r = rp_json_iter_next(&it, k, sizeof k, &x, &xl)) == 1) {
    if (!strcmp(k, "dtype")) {
      if (*x != '"' || xl - 2 >= sizeof e->dtype)
        return rp_err(RP_EFORMAT, "'%s': tensor '%s' has a bad dtype", f->path, key);
      memcpy(e->dtype, x + 1, xl - 2);
      have |= 1;
    } else if (!strcmp(k, "shape") || !strcmp(k, "data_offsets")) {
      int is_shape = k[0] == 's', cnt = 0, rr;
      rp_json_iter ai;
      if (rp_json_iter_begin(&ai, x) != RP_OK || ai.close != ']')
        return rp_err(RP_EFORMAT, "'%s': tensor '%s' %s is not an array", f->path, key, k);
      const char *y;
      size_t yl;
      while ((rr = rp_json_iter_next(&ai, NULL, 0, &y, &yl)) == 1) {
        if (yl >= sizeof tmp || !(*y >= '0' && *y <= '9') || memchr(y, '.', yl) ||
            memchr(y, 'e', yl) || memchr(y, 'E', yl))
          return rp_err(RP_EFORMAT, "'%s': tensor '%s' %s holds a non-integer", f->path, key, k);
        memcpy(tmp, y, yl);
        tmp[yl] = '\0';
        errno = 0;
        uint64_t val = strtoull(tmp, NULL, 10);
        if (errno == ERANGE || val > ST_MAX_INT)
          return rp_err(RP_EFORMAT, "'%s': tensor '%s' %s holds %s, more than 2^53; the header "
                        "is corrupt", f->path, key, k, tmp);
        if (is_shape) {
          if (cnt >= 4)
            return rp_err(RP_EFORMAT, "'%s': tensor '%s' has more than 4 dimensions", f->path, key);
          e->shape[cnt] = (int64_t)val;
        } else if (cnt < 2) {
          if (cnt)
            e->end = val;
          else
            e->begin = val;
        }
        cnt++;
      }
      if (rr < 0) return (rp_status)rr;
      if (is_shape) {
        e->ndim = cnt;
        have |= 2;
      } else {
        if (cnt != 2)
          return rp_err(RP_EFORMAT, "'%s': tensor '%s' data_offsets needs 2 numbers", f->path, key);
        have |= 4;
      }
    }
  }
  if (r < 0) return (rp_status)r;
  if (have != 7)
    return rp_err(RP_EFORMAT, "'%s': tensor '%s' lacks %s", f->path, key,
                  !(have & 1) ? "a dtype" : !(have & 2) ? "a shape" : "data_offsets");
  int ds = dtype_size(e->dtype);
  if (!ds) return rp_err(RP_EFORMAT, "'%s': tensor '%s' has unknown dtype '%s'", f->path, key, e->dtype);
  uint64_t numel = 1;  /* every dimension <= 2^53: the product is checked, never wraps */
  for (int d = 0; d < e->ndim; d++) {
    uint64_t dim = (uint64_t)e->shape[d];
    if (dim && numel > ST_MAX_INT / dim)
      return rp_err(RP_EFORMAT, "'%s': tensor '%s' has more than 2^53 elements; the header is "
                    "corrupt", f->path, key);
    numel *= dim;
  }
  if (numel > ST_MAX_INT / (uint64_t)ds || e->end < e->begin ||
      e->end - e->begin != numel * (uint64_t)ds)
    return rp_err(RP_EFORMAT, "'%s': tensor '%s' spans bytes [%llu, %llu) but its shape needs %llu "
                  "bytes; the header is corrupt", f->path, key, (unsigned long long)e->begin,
                  (unsigned long long)e->end, (unsigned long long)(numel * ds));
  if (e->end > f->data_len)
    return rp_err(RP_EFORMAT, "'%s' is truncated: tensor '%s' ends at data byte %llu but the file "
                  "holds %llu data bytes", f->path, key, (unsigned long long)e->end,
                  (unsigned long long)f->data_len);
  return RP_OK;
}

rp_status rp_st_open(rp_st_file *f, const char *path) {
  memset(f, 0, sizeof *f);
  f->fd = -1;
  snprintf(f->path, sizeof f->path, "%s", path);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return rp_err(RP_EIO, "cannot open '%s': %s", path, strerror(errno));
  f->fd = fd;
  struct stat st;
  unsigned char le[8];
  rp_status s = RP_OK;
  char *hdr = NULL;
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < 8) {
    s = rp_err(RP_EFORMAT, "'%s' is too small to be a safetensors file (%lld bytes)", path,
               (long long)st.st_size);
    goto out;
  }
  if ((s = rp_io_pread(fd, le, 8, 0, path)) != RP_OK) goto out;
  for (int b = 7; b >= 0; b--) f->header_len = f->header_len << 8 | le[b];
  if (f->header_len < 2 || f->header_len > ST_MAX_HEADER || 8 + f->header_len > (uint64_t)st.st_size) {
    s = rp_err(RP_EFORMAT, "'%s' is not a safetensors file or is truncated: header length %llu, "
               "file size %lld bytes", path, (unsigned long long)f->header_len, (long long)st.st_size);
    goto out;
  }
  f->data_len = (uint64_t)st.st_size - 8 - f->header_len;
  hdr = malloc(f->header_len + 1);
  if (!hdr) {
    s = rp_err(RP_ENOMEM, "out of memory reading the header of '%s'", path);
    goto out;
  }
  if ((s = rp_io_pread(fd, hdr, f->header_len, 8, path)) != RP_OK) goto out;
  hdr[f->header_len] = '\0';
  if (memchr(hdr, '\0', f->header_len) || rp_json_validate(hdr) != RP_OK) {
    char why[256];
    snprintf(why, sizeof why, "%s", memchr(hdr, '\0', f->header_len) ? "NUL byte" : rp_errmsg());
    s = rp_err(RP_EFORMAT, "'%s' is corrupt: its safetensors header is not valid JSON (%s)", path,
               why);
    goto out;
  }
  rp_json_iter it;
  if (rp_json_iter_begin(&it, hdr) != RP_OK || it.close != '}') {
    s = rp_err(RP_EFORMAT, "'%s': safetensors header is not a JSON object", path);
    goto out;
  }
  char key[256];
  const char *v;
  size_t vl;
  int r, cap = 0;
  while ((r = rp_json_iter_next(&it, key, sizeof key, &v, &vl)) == 1) {
    if (!strcmp(key, "__metadata__")) {
      if (f->metadata_json) {
        s = rp_err(RP_EFORMAT, "'%s': the safetensors header has two __metadata__ members", path);
        goto out;
      }
      f->metadata_json = strndup(v, vl);
      if (!f->metadata_json) {
        s = rp_err(RP_ENOMEM, "out of memory reading the header of '%s'", path);
        goto out;
      }
      continue;
    }
    if (strlen(key) >= sizeof f->entries[0].name) {
      s = rp_err(RP_EFORMAT, "'%s': tensor name '%.40s...' is too long", path, key);
      goto out;
    }
    if (f->n == cap) {
      cap = cap ? 2 * cap : 64;
      rp_st_entry *ne = realloc(f->entries, cap * sizeof *ne);
      if (!ne) {
        s = rp_err(RP_ENOMEM, "out of memory");
        goto out;
      }
      f->entries = ne;
    }
    if ((s = parse_entry(&f->entries[f->n], key, v, f)) != RP_OK) goto out;
    f->n++;
  }
  if (r < 0) {
    char why[512];
    snprintf(why, sizeof why, "%s", rp_errmsg());
    s = rp_err(RP_EFORMAT, "'%s': %s", path, why);
    goto out;
  }
  if (f->n) qsort(f->entries, f->n, sizeof *f->entries, cmp_entry);
  for (int i = 1; i < f->n; i++)  /* a name twice would make the lookup ambiguous */
    if (!strcmp(f->entries[i - 1].name, f->entries[i].name)) {
      s = rp_err(RP_EFORMAT, "'%s': tensor '%s' appears twice in the header; the file is corrupt",
                 path, f->entries[i].name);
      goto out;
    }
out:
  free(hdr);
  if (s != RP_OK) rp_st_close(f);
  return s;
}

const rp_st_entry *rp_st_find(const rp_st_file *f, const char *name) {
  rp_st_entry k;
  if (strlen(name) >= sizeof k.name || !f->n) return NULL;
  snprintf(k.name, sizeof k.name, "%s", name);
  return bsearch(&k, f->entries, f->n, sizeof k, cmp_entry);
}

rp_status rp_st_read(const rp_st_file *f, const rp_st_entry *e, uint64_t at, void *dst, size_t bytes) {
  if (at > e->end - e->begin || bytes > e->end - e->begin - at)
    return rp_err(RP_EINTERNAL, "read of %zu bytes at %llu is outside tensor '%s'", bytes,
                  (unsigned long long)at, e->name);
  return rp_io_pread(f->fd, dst, bytes, (off_t)(8 + f->header_len + e->begin + at), f->path);
}

/* IEEE half to float, exactly (every half is a float). */
static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1F, m = h & 0x3FF, bits;
  if (e == 0x1F) {
    bits = sign | 0x7F800000u | m << 13;  /* inf / nan */
  } else if (e) {
    bits = sign | (e + 112) << 23 | m << 13;
  } else if (!m) {
    bits = sign;
  } else {  /* subnormal half: normal float */
    int sh = 0;
    while (!(m & 0x400)) m <<= 1, sh++;
    bits = sign | (uint32_t)(113 - sh) << 23 | (m & 0x3FF) << 13;
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static float bf16_bits_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

int rp_st_is_float(const char *dtype) {
  return !strcmp(dtype, "F32") || !strcmp(dtype, "F16") || !strcmp(dtype, "BF16");
}

rp_status rp_st_read_f32(const rp_st_file *f, const rp_st_entry *e, uint64_t first, float *dst,
                         size_t n) {
  if (!strcmp(e->dtype, "F32")) return rp_st_read(f, e, first * 4, dst, n * 4);
  if (!rp_st_is_float(e->dtype))
    return rp_err(RP_EFORMAT, "tensor '%s' in '%s' is %s; ringpipe reads F32, F16 and BF16 "
                  "weights", e->name, f->path, e->dtype);
  /* 16-bit: read into the upper half of dst, widen from the front (each float
   * is written at or before the 16-bit value it comes from has been read). */
  uint16_t *half = (uint16_t *)(dst + n) - n;
  RP_TRY(rp_st_read(f, e, first * 2, half, n * 2));
  int bf = !strcmp(e->dtype, "BF16");
  for (size_t i = 0; i < n; i++) {
    uint16_t h = half[i];
    dst[i] = bf ? bf16_bits_to_float(h) : half_to_float(h);
  }
  return RP_OK;
}

void rp_st_close(rp_st_file *f) {
  if (f->fd >= 0) close(f->fd);
  free(f->entries);
  free(f->metadata_json);
  f->fd = -1;
  f->entries = NULL;
  f->metadata_json = NULL;
  f->n = 0;
}
