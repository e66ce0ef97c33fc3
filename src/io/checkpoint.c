/* Checkpoint directories: model.safetensors + optim.safetensors + meta.json
 * (last), written crash-safely; loading by tensor name into any chunk split. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/io_fs.h"
#include "io/io_st.h"
#include "ringpipe/rp_checkpoint.h"

#define CK_MODEL "model.safetensors"
#define CK_OPTIM "optim.safetensors"
#define CK_META "meta.json"
#define CK_HF_CONFIG "config.json"
#define CK_ROWS 64  /* rows per block when transposing on load */

/* ---- shapes */

typedef struct {
  int ndim;
  int64_t shape[2];
  int transpose;   /* file holds the transpose of ringpipe's (out, in) matrix */
  size_t nfloats;  /* floats in the file tensor */
} fshape;

/* Shape of t in model.safetensors: HF GPT-2 (wte without padded rows, Conv1D
 * weights transposed). */
static fshape model_shape(const rp_chunk *c, const rp_tensor *t) {
  fshape f = {0};
  if (t->is_wte) {
    f.ndim = 2;
    f.shape[0] = c->cfg.V;
    f.shape[1] = t->shape[1];
  } else if (t->ndim == 2) {
    f.ndim = 2;
    f.transpose = t->hf_transpose;
    f.shape[0] = t->hf_transpose ? t->shape[1] : t->shape[0];
    f.shape[1] = t->hf_transpose ? t->shape[0] : t->shape[1];
  } else {
    f.ndim = 1;
    f.shape[0] = (int64_t)t->numel;
  }
  f.nfloats = (size_t)f.shape[0] * (f.ndim == 2 ? (size_t)f.shape[1] : 1);
  return f;
}

/* Shape of t's optimizer state: ringpipe's own layout, all rows. */
static fshape optim_shape(const rp_tensor *t) {
  fshape f = {0};
  f.ndim = t->ndim == 2 ? 2 : 1;
  f.shape[0] = t->ndim == 2 ? t->shape[0] : (int64_t)t->numel;
  f.shape[1] = t->ndim == 2 ? t->shape[1] : 0;
  f.nfloats = t->numel;
  return f;
}

static void fmt_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
  size_t o = (size_t)snprintf(buf, cap, "[");
  for (int d = 0; d < ndim && o < cap; d++)
    o += (size_t)snprintf(buf + o, cap - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* ---- saving */

typedef struct {
  rp_st_wtensor *v;
  int n, cap;
} wlist;

static rp_status wlist_add(wlist *l, const char *prefix, const rp_tensor *t, fshape fs,
                           const float *data) {
  char name[128];
  snprintf(name, sizeof name, "%s%s", prefix, t->name);
  for (int i = 0; i < l->n; i++) {
    if (strcmp(l->v[i].name, name)) continue;
    if (l->v[i].ndim != fs.ndim || l->v[i].shape[0] != fs.shape[0] ||
        (fs.ndim == 2 && l->v[i].shape[1] != fs.shape[1]))
      return rp_err(RP_EINVAL, "tensor '%s' appears in two parts with different shapes; the parts "
                    "come from different model configs", name);
    return RP_OK;  /* shared (tied wte): written once */
  }
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 64;
    rp_st_wtensor *nv = realloc(l->v, l->cap * sizeof *nv);
    if (!nv) return rp_err(RP_ENOMEM, "out of memory");
    l->v = nv;
  }
  rp_st_wtensor *w = &l->v[l->n++];
  memset(w, 0, sizeof *w);
  snprintf(w->name, sizeof w->name, "%s", name);
  w->ndim = fs.ndim;
  w->shape[0] = fs.shape[0];
  w->shape[1] = fs.shape[1];
  w->data = data;
  w->transpose = fs.transpose;
  return RP_OK;
}

static rp_status collect(const rp_ckpt_part *parts, int nparts, wlist *model, wlist *optim) {
  for (int p = 0; p < nparts; p++) {
    const rp_chunk *c = parts[p].chunk;
    if (!c || !c->params)
      return rp_err(RP_EINVAL, "checkpoint part %d has no initialised chunk", p);
    for (int i = 0; i < c->num_tensors; i++) {
      const rp_tensor *t = &c->tensors[i];
      RP_TRY(wlist_add(model, "", t, model_shape(c, t), c->params + t->offset));
      if (parts[p].m) RP_TRY(wlist_add(optim, "m.", t, optim_shape(t), parts[p].m + t->offset));
      if (parts[p].v) RP_TRY(wlist_add(optim, "v.", t, optim_shape(t), parts[p].v + t->offset));
    }
  }
  return RP_OK;
}

static int is_ws(char ch) { return ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r'; }

/* Trims whitespace from the span [*b, *b + *n). */
static void trim_span(const char **b, size_t *n) {
  while (*n && is_ws(**b)) (*b)++, (*n)--;
  while (*n && is_ws((*b)[*n - 1])) (*n)--;
}

/* "{"format":..,"version":1,<caller members>}", validated. */
static rp_status build_meta(const char *body, char **out) {
  *out = NULL;
  size_t bl = body ? strlen(body) : 0;
  if (!body) body = "";
  trim_span(&body, &bl);
  if (bl && body[0] == '{' && body[bl - 1] == '}') {  /* an object: use its members */
    body++;
    bl -= 2;
    trim_span(&body, &bl);
  }
  size_t cap = bl + 128;
  char *m = malloc(cap);
  if (!m) return rp_err(RP_ENOMEM, "out of memory");
  snprintf(m, cap, "{\"format\":\"%s\",\"version\":%d%s%.*s}\n", RP_CKPT_FORMAT,
           RP_CKPT_VERSION, bl ? "," : "", (int)bl, body);
  if (rp_json_validate(m) != RP_OK) {
    char why[256];
    snprintf(why, sizeof why, "%s", rp_errmsg());
    free(m);
    return rp_err(RP_EINVAL, "checkpoint metadata is not valid JSON members (%s); pass e.g. "
                  "\"step\":10,\"config\":{...}", why);
  }
  *out = m;
  return RP_OK;
}

static int is_ours(const char *name) {
  return !strcmp(name, CK_MODEL) || !strcmp(name, CK_OPTIM) || !strcmp(name, CK_META) ||
         !strcmp(name, CK_HF_CONFIG) || strstr(name, ".tmp-") != NULL;
}

/* Inspects an existing directory: *has_meta, and RP_EINVAL if it holds files
 * that are not part of a checkpoint (we never swap those away). */
static rp_status inspect_dir(const char *dir, int *has_meta) {
  *has_meta = 0;
  DIR *d = opendir(dir);
  if (!d) return rp_err(RP_EIO, "cannot read directory '%s': %s", dir, strerror(errno));
  struct dirent *e;
  char foreign[256] = "";
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (!strcmp(e->d_name, CK_META)) *has_meta = 1;
    if (!is_ours(e->d_name) && !foreign[0]) snprintf(foreign, sizeof foreign, "%s", e->d_name);
  }
  closedir(d);
  if (foreign[0])
    return rp_err(RP_EINVAL, "'%s' exists and holds files that are not part of a checkpoint (e.g. "
                  "'%s'); save into a new or empty directory, or over an earlier checkpoint",
                  dir, foreign);
  return RP_OK;
}

/* Removes our files from dir and then dir itself (warns if others remain). */
static void remove_ckpt_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char path[RP_IO_PATH + 300];
  while ((e = readdir(d))) {
    if (!is_ours(e->d_name)) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  if (rmdir(dir) != 0) rp_warn("could not remove old checkpoint directory '%s': %s", dir, strerror(errno));
}

static rp_status write_files(const char *dir, const rp_gpt_config *cfg, const wlist *model,
                             const wlist *optim, const char *meta) {
  char path[RP_IO_PATH + 64];  /* dir may be a DIR.tmp-PID sibling */
  snprintf(path, sizeof path, "%s/" CK_OPTIM, dir);
  if (!optim->n && rp_io_exists(path) && unlink(path) != 0)  /* stale state must not be resumed */
    return rp_err(RP_EIO, "cannot remove stale '%s': %s", path, strerror(errno));
  snprintf(path, sizeof path, "%s/" CK_MODEL, dir);
  RP_TRY(rp_st_write(path, model->v, model->n, "{\"format\":\"pt\"}"));
  if (optim->n) {
    snprintf(path, sizeof path, "%s/" CK_OPTIM, dir);
    RP_TRY(rp_st_write(path, optim->v, optim->n,
                       "{\"format\":\"pt\",\"content\":\"AdamW m and v, ringpipe layout\"}"));
  }
  RP_TRY(rp_hf_config_write(dir, cfg));
  snprintf(path, sizeof path, "%s/" CK_META, dir);
  rp_io_afile f;
  RP_TRY(rp_io_afile_open(&f, path));
  rp_status s = rp_io_afile_write(&f, meta, strlen(meta));
  if (s != RP_OK) {
    rp_io_afile_abort(&f);
    return s;
  }
  return rp_io_afile_commit(&f);
}

/* Swaps the finished temporary directory in for the old checkpoint. */
static rp_status swap_in(const char *tmp, const char *dir) {
  if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) == 0) {
    remove_ckpt_dir(tmp);  /* now holds the old checkpoint */
    return rp_io_fsync_parent(dir);
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
    return rp_err(RP_EIO, "cannot move checkpoint '%s' into place: %s", tmp, strerror(errno));
  /* No atomic exchange here: a crash between the renames leaves the complete
   * old checkpoint under .old-PID and the new one under .tmp-PID. */
  char old[RP_IO_PATH + 32];
  snprintf(old, sizeof old, "%s.old-%ld", dir, (long)getpid());
  if (rename(dir, old) != 0)
    return rp_err(RP_EIO, "cannot move old checkpoint '%s' aside: %s", dir, strerror(errno));
  if (rename(tmp, dir) != 0) {
    int e = errno;
    rename(old, dir);
    return rp_err(RP_EIO, "cannot move checkpoint '%s' into place: %s", tmp, strerror(e));
  }
  remove_ckpt_dir(old);
  return rp_io_fsync_parent(dir);
}

/* Puts a finished temporary directory in place where nothing was before. */
static rp_status place_fresh(const char *tmp, const char *dir) {
  if (rename(tmp, dir) != 0)
    return rp_err(RP_EIO, "cannot move checkpoint '%s' into place: %s", tmp, strerror(errno));
  return rp_io_fsync_parent(dir);
}

void rp_ckpt_remove(const char *dir) { remove_ckpt_dir(dir); }

rp_status rp_ckpt_save(const char *dir_in, const rp_ckpt_part *parts, int nparts,
                       const char *meta_json) {
  if (!dir_in || !*dir_in) return rp_err(RP_EINVAL, "checkpoint directory name is empty");
  if (nparts < 1 || !parts) return rp_err(RP_EINVAL, "checkpoint save needs at least one part");
  char dir[RP_IO_PATH];
  if (strlen(dir_in) >= sizeof dir - 32)
    return rp_err(RP_EINVAL, "checkpoint path is longer than %d characters", RP_IO_PATH - 33);
  snprintf(dir, sizeof dir, "%s", dir_in);
  for (size_t l = strlen(dir); l > 1 && dir[l - 1] == '/'; l--) dir[l - 1] = '\0';

  char *meta = NULL;
  wlist model = {0}, optim = {0};
  rp_status s = build_meta(meta_json, &meta);
  if (s == RP_OK) s = collect(parts, nparts, &model, &optim);
  int has_meta = 0, fresh = 0;
  if (s == RP_OK) {
    if (!rp_io_exists(dir))
      fresh = 1;
    else if (!rp_io_is_dir(dir))
      s = rp_err(RP_EINVAL, "checkpoint path '%s' exists and is not a directory", dir);
    else
      s = inspect_dir(dir, &has_meta);
  }
  if (s == RP_OK) {
    /* Always through a sibling temporary: a failed save leaves neither a
     * half-written nor an empty directory under the final name. */
    char tmp[RP_IO_PATH + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", dir, (long)getpid());
    if (rp_io_exists(tmp)) remove_ckpt_dir(tmp);
    s = rp_io_mkdir_p(tmp);
    if (s == RP_OK) s = write_files(tmp, &parts[0].chunk->cfg, &model, &optim, meta);
    if (s == RP_OK) s = rp_io_fsync_dir(tmp);
    if (s == RP_OK) s = fresh ? place_fresh(tmp, dir) : swap_in(tmp, dir);
    if (s != RP_OK) remove_ckpt_dir(tmp);
  }
  free(meta);
  free(model.v);
  free(optim.v);
  return s;
}

/* ---- reading */

rp_status rp_ckpt_read_meta(const char *dir, char **json_out) {
  *json_out = NULL;
  if (!rp_io_is_dir(dir))
    return rp_err(RP_EIO, "checkpoint directory '%s' does not exist", dir);
  char path[RP_IO_PATH + 32];
  snprintf(path, sizeof path, "%s/" CK_META, dir);
  if (!rp_io_exists(path))
    return rp_err(RP_EIO, "'%s' is not a complete checkpoint: %s is missing (the save was "
                  "interrupted, or this is neither a ringpipe checkpoint nor a Hugging Face folder "
                  "with config.json); use an earlier checkpoint",
                  dir, CK_META);
  char *json;
  RP_TRY(rp_io_read_text(path, &json, NULL));
  char fmt[64];
  double ver = 0;
  rp_status s = rp_json_validate(json);
  if (s != RP_OK) {
    char why[256];
    snprintf(why, sizeof why, "%s", rp_errmsg());
    s = rp_err(RP_EFORMAT, "'%s' is corrupt: %s", path, why);
  } else if (rp_json_get_string(json, "format", fmt, sizeof fmt) != RP_OK ||
             strcmp(fmt, RP_CKPT_FORMAT)) {
    s = rp_err(RP_EFORMAT, "'%s' is not ringpipe checkpoint metadata (no \"format\": \"%s\")",
               path, RP_CKPT_FORMAT);
  } else if (rp_json_get_number(json, "version", &ver) != RP_OK || ver > RP_CKPT_VERSION) {
    s = rp_err(RP_EFORMAT, "'%s' has checkpoint version %g; this ringpipe reads version %d: "
               "upgrade ringpipe", path, ver, RP_CKPT_VERSION);
  }
  if (s != RP_OK) {
    free(json);
    return s;
  }
  *json_out = json;
  return RP_OK;
}

rp_status rp_ckpt_read_config(const char *meta, const char *where, rp_gpt_config *c) {
  static const char *const keys[6] = {"config.L", "config.C", "config.NH",
                                      "config.T", "config.V", "config.Vp"};
  int64_t v[6];
  const char *at;
  size_t alen;
  for (int i = 0; i < 6; i++) {
    if (i == 5 && rp_json_find(meta, keys[5], &at, &alen) != RP_OK) {
      v[5] = rp_pad_vocab((int)v[4]);  /* Vp is ringpipe's padding: optional in a hand-written file */
      break;
    }
    if (rp_json_get_int_in(meta, keys[i], INT32_MIN, INT32_MAX, &v[i]) != RP_OK) {
      char why[300];
      snprintf(why, sizeof why, "%s", rp_errmsg());
      return rp_err(RP_EFORMAT, "%s/meta.json has no valid %s (%s); is it a ringpipe checkpoint?",
                    where, keys[i], why);
    }
  }
  *c = (rp_gpt_config){.L = (int)v[0], .C = (int)v[1], .NH = (int)v[2], .T = (int)v[3],
                       .V = (int)v[4], .Vp = (int)v[5]};
  if (rp_gpt_config_validate(c) != RP_OK) {
    char why[300];
    snprintf(why, sizeof why, "%s", rp_errmsg());
    return rp_err(RP_EFORMAT, "%s/meta.json holds an invalid model config (L=%d C=%d NH=%d T=%d "
                  "V=%d Vp=%d: %s); the file is corrupt or was edited: use another checkpoint",
                  where, c->L, c->C, c->NH, c->T, c->V, c->Vp, why);
  }
  return RP_OK;
}

rp_status rp_ckpt_read_counter(const char *meta, const char *where, const char *key, int *out) {
  int64_t v;
  if (rp_json_get_int_in(meta, key, 0, INT32_MAX, &v) != RP_OK) {
    char why[300];
    snprintf(why, sizeof why, "%s", rp_errmsg());
    return rp_err(RP_EFORMAT, "%s/meta.json has no valid %s (%s); the file is corrupt or was "
                  "edited: use another checkpoint", where, key, why);
  }
  *out = (int)v;
  return RP_OK;
}

/* Layers present in the file (1 + the largest h.N), for messages. */
static int file_layers(const rp_st_file *f) {
  int L = 0, l;
  for (int i = 0; i < f->n; i++) {
    const char *nm = f->entries[i].name;
    if (!strncmp(nm, "transformer.", 12)) nm += 12;
    if (sscanf(nm, "h.%d.", &l) == 1 && l + 1 > L) L = l + 1;
  }
  return L;
}

static rp_status find_checked(const rp_st_file *f, const char *name, fshape fs,
                              const rp_chunk *c, const rp_st_entry **out) {
  char alt[160];
  const rp_st_entry *e = rp_st_find(f, name);
  snprintf(alt, sizeof alt, "transformer.%s", name);
  if (!e) e = rp_st_find(f, alt);
  if (!e)
    return rp_err(RP_EINVAL, "'%s' has no tensor '%s' (the file holds %d layers, this model %d): "
                  "the checkpoint was saved with a different model config or is not a GPT-2 "
                  "checkpoint; use the checkpoint's own config (\"config\" in meta.json)", f->path,
                  name, file_layers(f), c->cfg.L);
  if (!rp_st_is_float(e->dtype))
    return rp_err(RP_EFORMAT, "tensor '%s' in '%s' is %s; ringpipe loads F32, F16 and BF16 "
                  "tensors (convert the file to float32)", name, f->path, e->dtype);
  int ok = e->ndim == fs.ndim && e->shape[0] == fs.shape[0] &&
           (fs.ndim < 2 || e->shape[1] == fs.shape[1]);
  if (!ok) {
    char a[96], b[96];
    fmt_shape(a, sizeof a, e->ndim, e->shape);
    fmt_shape(b, sizeof b, fs.ndim, fs.shape);
    return rp_err(RP_EINVAL, "tensor '%s' is %s in '%s' but this model (L=%d C=%d NH=%d T=%d "
                  "V=%d) needs %s; load it with the checkpoint's own config (\"config\" in "
                  "meta.json) or fix --layers/--channels/--seq/--vocab", name, a, f->path,
                  c->cfg.L, c->cfg.C, c->cfg.NH, c->cfg.T, c->cfg.V, b);
  }
  *out = e;
  return RP_OK;
}

static rp_status read_into(const rp_st_file *f, const rp_st_entry *e, fshape fs, float *dst,
                           float *blk) {
  if (!fs.transpose) return rp_st_read_f32(f, e, 0, dst, fs.nfloats);
  size_t R = (size_t)fs.shape[0], Cn = (size_t)fs.shape[1];  /* file [R, Cn]; dst [Cn, R] */
  for (size_t r0 = 0; r0 < R; r0 += CK_ROWS) {
    size_t nr = RP_MIN((size_t)CK_ROWS, R - r0);
    RP_TRY(rp_st_read_f32(f, e, (uint64_t)r0 * Cn, blk, nr * Cn));
    for (size_t c = 0; c < Cn; c++)
      for (size_t r = 0; r < nr; r++) dst[c * R + r0 + r] = blk[r * Cn + c];
  }
  return RP_OK;
}

static rp_status load_model(const char *dir, const rp_ckpt_load_part *parts, int nparts) {
  char path[RP_IO_PATH + 32];
  snprintf(path, sizeof path, "%s/" CK_MODEL, dir);
  rp_st_file f;
  RP_TRY(rp_st_open(&f, path));
  size_t maxc = 0;
  for (int p = 0; p < nparts; p++) maxc = RP_MAX(maxc, (size_t)4 * parts[p].chunk->cfg.C);
  float *blk = malloc(CK_ROWS * maxc * sizeof(float));
  rp_status s = blk ? RP_OK : rp_err(RP_ENOMEM, "out of memory");
  for (int p = 0; p < nparts && s == RP_OK; p++) {
    rp_chunk *c = parts[p].chunk;
    for (int i = 0; i < c->num_tensors && s == RP_OK; i++) {
      const rp_tensor *t = &c->tensors[i];
      fshape fs = model_shape(c, t);
      const rp_st_entry *e;
      s = find_checked(&f, t->name, fs, c, &e);
      if (s == RP_OK) s = read_into(&f, e, fs, c->params + t->offset, blk);
      if (s == RP_OK && t->is_wte)  /* padded vocabulary rows are zero by convention */
        memset(c->params + t->offset + fs.nfloats, 0, (t->numel - fs.nfloats) * sizeof(float));
    }
  }
  free(blk);
  rp_st_close(&f);
  return s;
}

static rp_status load_optim(const char *dir, const rp_ckpt_load_part *parts, int nparts) {
  char path[RP_IO_PATH + 32], name[160];
  snprintf(path, sizeof path, "%s/" CK_OPTIM, dir);
  if (!rp_io_exists(path))
    return rp_err(RP_EIO, "'%s' has no %s: it was saved without optimizer state; load the "
                  "weights only and start the optimizer fresh", dir, CK_OPTIM);
  rp_st_file f;
  RP_TRY(rp_st_open(&f, path));
  rp_status s = RP_OK;
  for (int p = 0; p < nparts && s == RP_OK; p++) {
    rp_chunk *c = parts[p].chunk;
    float *mv[2] = {parts[p].m, parts[p].v};
    for (int k = 0; k < 2; k++) {
      if (!mv[k]) continue;
      for (int i = 0; i < c->num_tensors && s == RP_OK; i++) {
        const rp_tensor *t = &c->tensors[i];
        fshape fs = optim_shape(t);
        const rp_st_entry *e;
        snprintf(name, sizeof name, "%s%s", k ? "v." : "m.", t->name);
        s = find_checked(&f, name, fs, c, &e);
        if (s == RP_OK) s = rp_st_read(&f, e, 0, mv[k] + t->offset, fs.nfloats * sizeof(float));
      }
    }
  }
  rp_st_close(&f);
  return s;
}

rp_status rp_ckpt_load(const char *dir, const rp_ckpt_load_part *parts, int nparts) {
  if (nparts < 1 || !parts) return rp_err(RP_EINVAL, "checkpoint load needs at least one part");
  int want_optim = 0;
  for (int p = 0; p < nparts; p++) {
    if (!parts[p].chunk || !parts[p].chunk->params)
      return rp_err(RP_EINVAL, "checkpoint part %d has no initialised chunk", p);
    want_optim |= parts[p].m != NULL || parts[p].v != NULL;
  }
  char *meta;
  RP_TRY(rp_ckpt_read_meta(dir, &meta));  /* refuses incomplete checkpoints */
  free(meta);
  RP_TRY(load_model(dir, parts, nparts));
  if (want_optim) RP_TRY(load_optim(dir, parts, nparts));
  return RP_OK;
}

rp_status rp_ckpt_load_weights(const char *dir, const rp_ckpt_load_part *parts, int nparts) {
  if (nparts < 1 || !parts) return rp_err(RP_EINVAL, "checkpoint load needs at least one part");
  for (int p = 0; p < nparts; p++)
    if (!parts[p].chunk || !parts[p].chunk->params)
      return rp_err(RP_EINVAL, "checkpoint part %d has no initialised chunk", p);
  return load_model(dir, parts, nparts);
}
