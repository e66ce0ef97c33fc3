/* TensorBoard event files (format: rp_tb.h): CRC32C, TFRecord framing, the
 * Event / Summary protobufs encoded by hand, and the mirror of metrics.jsonl. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "io/io_fs.h"
#include "ringpipe/rp_json.h"
#include "ringpipe/rp_tb.h"

#define TB_DIR "tensorboard"
#define TB_SUFFIX ".ringpipe"
#define TB_TAG_MAX 200

/* ---- CRC32C, bitwise over a 256-entry table */

static uint32_t crc_table[256];

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    crc_table[i] = c;
  }
}

uint32_t rp_crc32c(const void *data, size_t n) {
  if (!crc_table[1]) crc_init();  /* rank 0's main thread writes the events */
  const unsigned char *p = data;
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t rp_tb_masked_crc(const void *data, size_t n) {
  uint32_t c = rp_crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- protobuf, the few wire types an Event needs */

typedef struct {
  unsigned char *p;
  size_t len, cap;
} pbuf;

static void pb_byte(pbuf *b, unsigned char c) {
  if (b->len < b->cap) b->p[b->len] = c;
  b->len++;
}

static void pb_varint(pbuf *b, uint64_t v) {
  do {
    pb_byte(b, (unsigned char)((v & 0x7F) | (v >= 0x80 ? 0x80 : 0)));
    v >>= 7;
  } while (v);
}

static void pb_fixed(pbuf *b, const void *v, int bytes) {  /* little-endian host */
  for (int i = 0; i < bytes; i++) pb_byte(b, ((const unsigned char *)v)[i]);
}

static void pb_bytes(pbuf *b, int field, const void *s, size_t n) {
  pb_varint(b, (uint64_t)field << 3 | 2);
  pb_varint(b, n);
  for (size_t i = 0; i < n; i++) pb_byte(b, ((const unsigned char *)s)[i]);
}

static size_t varint_len(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) v >>= 7, n++;
  return n;
}

/* Event{wall_time=1 (double), step=2 (int64)} plus what the caller appends. */
static void pb_event_head(pbuf *b, double wall_time, int64_t step) {
  pb_varint(b, 1 << 3 | 1);
  pb_fixed(b, &wall_time, 8);
  pb_varint(b, 2 << 3 | 0);
  pb_varint(b, (uint64_t)step);
}

size_t rp_tb_encode_scalar(unsigned char *buf, size_t cap, double wall_time, int64_t step,
                           const char *tag, float value) {
  size_t tl = strlen(tag);
  /* Value{tag=1, simple_value=2 (float)} inside Summary{value=1} inside Event.summary=5 */
  size_t value_len = 1 + varint_len(tl) + tl + 1 + 4;
  size_t summary_len = 1 + varint_len(value_len) + value_len;
  pbuf b = {buf, 0, cap};
  pb_event_head(&b, wall_time, step);
  pb_varint(&b, 5 << 3 | 2);
  pb_varint(&b, summary_len);
  pb_varint(&b, 1 << 3 | 2);
  pb_varint(&b, value_len);
  pb_bytes(&b, 1, tag, tl);
  pb_varint(&b, 2 << 3 | 5);
  pb_fixed(&b, &value, 4);
  return b.len <= cap ? b.len : 0;
}

static size_t encode_file_version(unsigned char *buf, size_t cap, double wall_time) {
  static const char v[] = "brain.Event:2";
  pbuf b = {buf, 0, cap};
  pb_event_head(&b, wall_time, 0);
  pb_bytes(&b, 3, v, sizeof v - 1);
  return b.len <= cap ? b.len : 0;
}

/* One TFRecord. */
static int write_record(FILE *f, const unsigned char *data, size_t n) {
  unsigned char head[12];
  uint64_t len = n;
  memcpy(head, &len, 8);
  uint32_t c = rp_tb_masked_crc(head, 8), d = rp_tb_masked_crc(data, n);
  memcpy(head + 8, &c, 4);
  return fwrite(head, 1, 12, f) == 12 && fwrite(data, 1, n, f) == n && fwrite(&d, 1, 4, f) == 4;
}

/* ---- the mirror of metrics.jsonl */

struct rp_tb_mirror {
  FILE *ev;
  char jsonl[RP_IO_PATH], path[RP_IO_PATH + 128];
  long offset;  /* bytes of metrics.jsonl already mirrored */
  int64_t last_step;
  int failed;
};

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Scalars of one JSON value under `tag`: numbers as they are, objects and
 * arrays member by member ("a/b", "a/0"); strings, booleans and null skipped. */
static int emit_value(rp_tb_mirror *m, const char *tag, const char *v, size_t n, int64_t step,
                      double wall) {
  if (*v == '{' || *v == '[') {
    rp_json_iter it;
    char key[64], sub[TB_TAG_MAX + 80];
    const char *x;
    size_t xl;
    int r;
    if (rp_json_iter_begin(&it, v) != RP_OK) return 0;
    for (int i = 0; (r = rp_json_iter_next(&it, key, sizeof key, &x, &xl)) == 1; i++) {
      if (*v == '{' && !tag[0] && !strcmp(key, "step")) continue;
      if (*v == '[') snprintf(key, sizeof key, "%d", i);
      snprintf(sub, sizeof sub, "%s%s%s", tag, tag[0] ? "/" : "", key);
      if (strlen(sub) < TB_TAG_MAX && !emit_value(m, sub, x, xl, step, wall)) return 0;
    }
    return r == 0;
  }
  if (!((*v >= '0' && *v <= '9') || *v == '-')) return 1;
  char num[64];
  snprintf(num, sizeof num, "%.*s", (int)(n < 63 ? n : 63), v);
  unsigned char buf[TB_TAG_MAX + 128];
  size_t len = rp_tb_encode_scalar(buf, sizeof buf, wall, step, tag, (float)strtod(num, NULL));
  return len && write_record(m->ev, buf, len);
}

/* One metrics line: its "step" and every number in it. A line without a step
 * (the end-of-run pipeline report) belongs to the last step seen. */
static int emit_line(rp_tb_mirror *m, const char *line, double wall) {
  int64_t step;
  if (rp_json_validate(line) != RP_OK) return 1;
  if (rp_json_get_int64(line, "step", &step) == RP_OK)
    m->last_step = step;
  else
    step = m->last_step;
  return emit_value(m, "", line, strlen(line), step, wall);
}

/* Removes OUT/tensorboard's earlier ringpipe event files (ours by name). */
static void remove_old_events(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char path[RP_IO_PATH + 300];
  size_t sl = strlen(TB_SUFFIX);
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (strncmp(e->d_name, "events.out.tfevents.", 20) || l < sl ||
        strcmp(e->d_name + l - sl, TB_SUFFIX))
      continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
}

rp_status rp_tb_mirror_open(rp_tb_mirror **out, const char *out_dir) {
  *out = NULL;
  rp_tb_mirror *m = calloc(1, sizeof *m);
  if (!m) return rp_err(RP_ENOMEM, "out of memory");
  char dir[RP_IO_PATH + 32], host[64] = "host";
  snprintf(dir, sizeof dir, "%s/" TB_DIR, out_dir);
  snprintf(m->jsonl, sizeof m->jsonl, "%s/metrics.jsonl", out_dir);
  rp_status s = rp_io_mkdir_p(dir);
  if (s == RP_OK) {
    remove_old_events(dir);
    gethostname(host, sizeof host - 1);
    double now = wall_now();
    snprintf(m->path, sizeof m->path, "%s/events.out.tfevents.%lld.%s.%ld" TB_SUFFIX, dir,
             (long long)now, host, (long)getpid());
    m->ev = fopen(m->path, "wb");
    unsigned char buf[64];
    size_t n = encode_file_version(buf, sizeof buf, now);
    if (!m->ev || !write_record(m->ev, buf, n) || fflush(m->ev))
      s = rp_err(RP_EIO, "cannot write TensorBoard events '%s': %s; pass a writable --out or "
                 "--tensorboard=0", m->path, strerror(errno));
  }
  if (s != RP_OK) {
    rp_tb_mirror_close(m);
    return s;
  }
  *out = m;
  return RP_OK;
}

rp_status rp_tb_mirror_sync(rp_tb_mirror *m) {
  FILE *f = fopen(m->jsonl, "rb");
  if (!f) return RP_OK;  /* nothing written yet */
  rp_status s = RP_OK;
  if (fseek(f, m->offset, SEEK_SET) == 0) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    double wall = wall_now();
    while (s == RP_OK && (n = getline(&line, &cap, f)) > 0 && line[n - 1] == '\n') {
      if (!emit_line(m, line, wall))
        s = rp_err(RP_EIO, "cannot append to TensorBoard events '%s' (disk full?)", m->path);
      m->offset += n;
    }
    free(line);
  }
  fclose(f);
  if (s == RP_OK && fflush(m->ev) != 0)
    s = rp_err(RP_EIO, "cannot write TensorBoard events '%s': %s", m->path, strerror(errno));
  if (s != RP_OK && !m->failed) rp_warn("%s", rp_errmsg());  /* once: the run goes on */
  if (s != RP_OK) m->failed = 1;
  return s;
}

void rp_tb_mirror_close(rp_tb_mirror *m) {
  if (!m) return;
  if (m->ev) {
    rp_tb_mirror_sync(m);
    fclose(m->ev);
  }
  free(m);
}

const char *rp_tb_mirror_path(const rp_tb_mirror *m) { return m->path; }
