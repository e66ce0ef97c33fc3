/* Schedules as CSV, the notation torch.distributed.pipelining and others use:
 * one row per rank, comma-separated actions <chunk><op><micro-batch> such as
 * 0F3, 1I2, 0W2, 0SEND_F1, 1RECV_B0. Lines starting with '#' are comments and
 * blank lines are skipped; empty cells (an idle step in some tools) too.
 *
 * The number before the op is the rank's local chunk. Rows written with global
 * stage indices instead (torch writes those) are recognised -- with p >= 2, a
 * valid local-chunk file has chunk 0 on rank 1, a stage-index file never does
 * -- and converted: stage = chunk * p + rank (the loop map), or stages r and
 * 2p-1-r on rank r (the V map of ZB-V and DualPipeV). A local-chunk file of a
 * V schedule says so in a comment line "# stage map: v", which the writer puts
 * there. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "ringpipe/rp_schedule.h"

static const char map_directive[] = "# stage map: v";

static rp_status write_rows(const rp_schedule *s, FILE *f, int stages) {
  fprintf(f, "# ringpipe schedule %s: p=%d v=%d m=%d, %s; row r = rank r, <%s><op><mb>\n",
          s->name[0] ? s->name : "csv", s->p, s->v, s->m,
          s->lowered ? "with SEND/RECV" : "compute only", stages ? "stage" : "chunk");
  if (s->map == RP_MAP_V && !stages) fprintf(f, "%s\n", map_directive);
  for (int r = 0; r < s->p; r++) {
    for (int i = 0; i < s->n[r]; i++) {
      char txt[48];
      rp_action a = s->acts[r][i];
      if (stages) a.chunk = rp_schedule_stage(s, r, a.chunk);
      rp_action_str(a, txt, sizeof txt);
      fprintf(f, "%s%s", i ? "," : "", txt);
    }
    fputc('\n', f);
  }
  return ferror(f) ? rp_err(RP_EIO, "writing a schedule CSV failed") : RP_OK;
}

rp_status rp_schedule_csv_write(const rp_schedule *s, FILE *f) { return write_rows(s, f, 0); }
rp_status rp_schedule_csv_write_stages(const rp_schedule *s, FILE *f) {
  return write_rows(s, f, 1);
}

static rp_status save_rows(const rp_schedule *s, const char *path, int stages) {
  FILE *f = fopen(path, "w");
  if (!f) return rp_err(RP_EIO, "cannot write %s: check the directory exists", path);
  rp_status st = write_rows(s, f, stages);
  if (fclose(f) != 0 && st == RP_OK) st = rp_err(RP_EIO, "closing %s failed", path);
  return st;
}

rp_status rp_schedule_csv_save(const rp_schedule *s, const char *path) {
  return save_rows(s, path, 0);
}
rp_status rp_schedule_csv_save_stages(const rp_schedule *s, const char *path) {
  return save_rows(s, path, 1);
}

rp_status rp_schedule_csv_format(const rp_schedule *s, char **text) {
  size_t len = 0;
  *text = NULL;
  FILE *f = open_memstream(text, &len);
  if (!f) return rp_err(RP_ENOMEM, "out of memory formatting a schedule");
  rp_status st = rp_schedule_csv_write(s, f);
  fclose(f);
  if (st != RP_OK) {
    free(*text);
    *text = NULL;
  }
  return st;
}

/* Where each parsed action came from, for located errors. */
typedef struct {
  int *line;  /* per rank */
  int **col;  /* per rank, per action */
  int *ncol, *capcol;
} src_map;

static void map_free(src_map *mp, int rows) {
  for (int r = 0; r < rows && mp->col; r++) free(mp->col[r]);
  free(mp->col);
  free(mp->line);
  free(mp->ncol);
  free(mp->capcol);
}

/* First pass: rows and their lines. */
static int count_rows(const char *text) {
  int rows = 0;
  for (const char *l = text; *l;) {
    const char *e = strchr(l, '\n');
    size_t len = e ? (size_t)(e - l) : strlen(l);
    size_t i = 0;
    while (i < len && (l[i] == ' ' || l[i] == '\t' || l[i] == '\r')) i++;
    if (i < len && l[i] != '#') rows++;
    if (!e) break;
    l = e + 1;
  }
  return rows;
}

static rp_status located(const char *src, int line, int col, const char *msg) {
  return rp_err(RP_EFORMAT, "%s:%d:%d: %s", src, line, col, msg);
}

/* Whether every action's number is a stage its rank holds under `map`. */
static int rows_are_stages(const rp_schedule *s, int map) {
  for (int r = 0; r < s->p; r++)
    for (int i = 0; i < s->n[r]; i++) {
      int st = s->acts[r][i].chunk, owner, chunk;
      if (map == RP_MAP_V && st >= 2 * s->p) return 0;
      rp_stage_owner(map, s->p, st, &owner, &chunk);
      if (owner != r) return 0;
    }
  return 1;
}

/* Converts stage-index rows to local chunks (the loop map tried first: a
 * V file is never a loop file, since rank 0 holds stage 2p-1 there). */
static void maybe_from_stages(rp_schedule *s) {
  if (s->p < 2) return;
  int map = rows_are_stages(s, RP_MAP_LOOP) ? RP_MAP_LOOP
          : rows_are_stages(s, RP_MAP_V)    ? RP_MAP_V
                                            : -1;
  if (map < 0) return;
  s->map = map;
  for (int r = 0; r < s->p; r++)
    for (int i = 0; i < s->n[r]; i++) {
      int owner;
      rp_stage_owner(map, s->p, s->acts[r][i].chunk, &owner, &s->acts[r][i].chunk);
    }
}

/* The "# stage map: v" comment line of a local-chunk V file. */
static int declares_v_map(const char *text) {
  for (const char *l = text; *l;) {
    const char *e = strchr(l, '\n');
    size_t len = e ? (size_t)(e - l) : strlen(l), n = sizeof map_directive - 1;
    while (len > n && (l[len - 1] == '\r' || l[len - 1] == ' ')) len--;
    if (len == n && !memcmp(l, map_directive, n)) return 1;
    if (!e) break;
    l = e + 1;
  }
  return 0;
}

/* Sets v and m from the largest chunk and micro-batch indices, after checking
 * that the file can hold them: every rank needs one F per (chunk, micro-batch),
 * so v x m can be at most its number of actions. A stray huge index is then
 * reported where it stands instead of sizing the validator's tables by it. */
static rp_status claim_dims(rp_schedule *s, const char *src, const src_map *mp) {
  int max_chunk = 0, max_mb = 0, fewest = 0;
  rp_sched_pos at_chunk = {0, 0}, at_mb = {0, 0};
  for (int r = 0; r < s->p; r++) {
    if (s->n[r] < s->n[fewest]) fewest = r;
    for (int i = 0; i < s->n[r]; i++) {
      rp_action a = s->acts[r][i];
      if (a.chunk > max_chunk) max_chunk = a.chunk, at_chunk = (rp_sched_pos){r, i};
      if (a.mb > max_mb) max_mb = a.mb, at_mb = (rp_sched_pos){r, i};
    }
  }
  long long v = (long long)max_chunk + 1, m = (long long)max_mb + 1, n = s->n[fewest];
  if (v * m > n) {
    rp_sched_pos w = m > n || max_chunk == 0 ? at_mb : at_chunk;
    char txt[48];
    rp_action_str(s->acts[w.rank][w.index], txt, sizeof txt);
    return rp_err(RP_EFORMAT, "%s:%d:%d: action %s makes the schedule %lld chunks x %lld "
                  "micro-batches, but rank %d has only %lld actions (it needs one F for each); "
                  "fix the index", src, mp->line[w.rank], mp->col[w.rank][w.index], txt, v, m,
                  fewest, n);
  }
  s->v = (int)v;
  s->m = (int)m;
  return rp_schedule_check_size(s->p, s->v, s->m);
}

static rp_status parse_rows(const char *text, const char *src, rp_schedule *s, src_map *mp) {
  int row = 0, lineno = 0;
  for (const char *l = text; *l;) {
    const char *e = strchr(l, '\n');
    size_t len = e ? (size_t)(e - l) : strlen(l);
    lineno++;
    size_t i = 0;
    while (i < len && (l[i] == ' ' || l[i] == '\t' || l[i] == '\r')) i++;
    if (i < len && l[i] != '#') {
      mp->line[row] = lineno;
      for (size_t c0 = 0; c0 <= len;) {
        size_t c1 = c0;
        while (c1 < len && l[c1] != ',') c1++;
        size_t a = c0, b = c1;
        while (a < b && (l[a] == ' ' || l[a] == '\t')) a++;
        while (b > a && (l[b - 1] == ' ' || l[b - 1] == '\t' || l[b - 1] == '\r')) b--;
        if (b > a) {
          rp_action act;
          if (rp_action_parse(l + a, b - a, &act) != RP_OK) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s", rp_errmsg());
            return located(src, lineno, (int)a + 1, msg);
          }
          RP_TRY(rp_schedule_push(s, row, act));
          if (mp->ncol[row] == mp->capcol[row]) {
            int cap = mp->capcol[row] ? 2 * mp->capcol[row] : 16;
            int *grown = realloc(mp->col[row], (size_t)cap * sizeof *grown);
            if (!grown) return rp_err(RP_ENOMEM, "out of memory reading %s", src);
            mp->col[row] = grown;
            mp->capcol[row] = cap;
          }
          mp->col[row][mp->ncol[row]++] = (int)a + 1;
        }
        c0 = c1 + 1;
      }
      if (s->n[row] == 0) return located(src, lineno, 1, "a rank's row has no actions");
      row++;
    }
    if (!e) break;
    l = e + 1;
  }
  return RP_OK;
}

rp_status rp_schedule_csv_parse(const char *text, const char *src, rp_schedule **out) {
  *out = NULL;
  int rows = count_rows(text);
  if (rows == 0)
    return rp_err(RP_EFORMAT, "%s: no schedule rows (one row of actions per rank expected)",
                  src);
  /* v and m are known only after parsing: parse into a provisional container
   * and fix them up afterwards (push does not look at v or m). */
  rp_schedule *s;
  RP_TRY(rp_schedule_new(rows, 1, 1, "csv", &s));
  src_map mp = {calloc((size_t)rows, sizeof(int)), calloc((size_t)rows, sizeof(int *)),
                calloc((size_t)rows, sizeof(int)), calloc((size_t)rows, sizeof(int))};
  rp_status st = RP_OK;
  if (!mp.line || !mp.col || !mp.ncol || !mp.capcol)
    st = rp_err(RP_ENOMEM, "out of memory reading %s", src);
  if (st == RP_OK) st = parse_rows(text, src, s, &mp);
  if (st == RP_OK) {
    if (declares_v_map(text)) s->map = RP_MAP_V;
    maybe_from_stages(s);
    st = claim_dims(s, src, &mp);
  }
  if (st == RP_OK) {
    rp_sched_pos where;
    if (rp_schedule_validate(s, &where) != RP_OK) {
      char msg[700];
      snprintf(msg, sizeof msg, "%s", rp_errmsg());
      int r = where.rank >= 0 ? where.rank : 0;
      int col = where.index >= 0 && where.index < mp.ncol[r] ? mp.col[r][where.index] : 1;
      st = rp_err(RP_EINVAL, "%s:%d:%d: %s", src, mp.line[r], col, msg);
    }
  }
  map_free(&mp, rows);
  if (st != RP_OK) {
    rp_schedule_free(s);
    return st;
  }
  *out = s;
  return RP_OK;
}

rp_status rp_schedule_csv_load(const char *path, rp_schedule **out) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return rp_err(RP_EIO, "cannot open schedule file %s: check the path", path);
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  while (buf) {
    len += fread(buf + len, 1, cap - 1 - len, f);
    if (len < cap - 1) break;
    char *grown = realloc(buf, cap * 2);
    if (!grown) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = grown;
    cap *= 2;
  }
  int bad = ferror(f);
  fclose(f);
  if (!buf) return rp_err(RP_ENOMEM, "out of memory reading %s", path);
  if (bad) {
    free(buf);
    return rp_err(RP_EIO, "reading %s failed", path);
  }
  buf[len] = '\0';
  if (memchr(buf, '\0', len)) {
    free(buf);
    return rp_err(RP_EFORMAT, "%s is not a text file (it contains NUL bytes)", path);
  }
  rp_status st = rp_schedule_csv_parse(buf, path, out);
  free(buf);
  return st;
}
