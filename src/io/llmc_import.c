/* llm.c fp32 model files (gpt2_124M.bin etc.): config, chunk load, save.
 * llm.c stores each tensor in the same (out, in) orientation as ringpipe, but
 * groups tensors by kind across all layers; we translate names to offsets. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/io_fs.h"
#include "ringpipe/rp_checkpoint.h"

#define LLMC_SHARD_MAGIC 20240520
#define LLMC_NKINDS 16

/* llm.c's parameter order; layer kinds are [L, ...] blocks. */
static const char *kind_suffix[LLMC_NKINDS] = {
    "wte.weight",         "wpe.weight",       "ln_1.weight",        "ln_1.bias",
    "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
    "ln_2.weight",        "ln_2.bias",        "mlp.c_fc.weight",    "mlp.c_fc.bias",
    "mlp.c_proj.weight",  "mlp.c_proj.bias",  "ln_f.weight",        "ln_f.bias"};

/* Floats per layer (or in total for the non-layer kinds 0, 1, 14, 15). */
static size_t kind_size(const rp_gpt_config *c, int k) {
  size_t C = (size_t)c->C;
  static const int mult_cc[LLMC_NKINDS] = {0, 0, 0, 0, 3, 0, 1, 0, 0, 0, 4, 0, 4, 0, 0, 0};
  static const int mult_c[LLMC_NKINDS] = {0, 0, 1, 1, 0, 3, 0, 1, 1, 1, 0, 4, 0, 1, 1, 1};
  if (k == 0) return (size_t)c->Vp * C;
  if (k == 1) return (size_t)c->T * C;
  return mult_cc[k] * C * C + mult_c[k] * C;
}

static int is_layer_kind(int k) { return k >= 2 && k <= 13; }

/* Float offset of each kind's block in the file's parameter area. */
static void kind_offsets(const rp_gpt_config *c, size_t off[LLMC_NKINDS + 1]) {
  off[0] = 0;
  for (int k = 0; k < LLMC_NKINDS; k++)
    off[k + 1] = off[k] + kind_size(c, k) * (is_layer_kind(k) ? (size_t)c->L : 1);
}

/* Kind and layer of a GPT-2 tensor name; -1 if unknown. */
static int name_kind(const char *name, int *layer) {
  int l, n = 0;
  *layer = -1;
  if (sscanf(name, "h.%d.%n", &l, &n) == 1 && n > 0) {
    for (int k = 2; k <= 13; k++)
      if (!strcmp(name + n, kind_suffix[k])) {
        *layer = l;
        return k;
      }
    return -1;
  }
  for (int k = 0; k < LLMC_NKINDS; k++)
    if (!is_layer_kind(k) && !strcmp(name, kind_suffix[k])) return k;
  return -1;
}

static rp_status read_header(int fd, const char *path, rp_gpt_config *cfg) {
  int32_t h[256];
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof h)
    return rp_err(RP_EFORMAT, "'%s' is too small to be an llm.c model file", path);
  RP_TRY(rp_io_pread(fd, h, sizeof h, 0, path));
  if (h[0] != RP_LLMC_MAGIC) {
    if (h[0] == LLMC_SHARD_MAGIC)
      return rp_err(RP_EFORMAT, "'%s' is a token shard, not an llm.c model file", path);
    return rp_err(RP_EFORMAT, "'%s' is not an llm.c model file: magic %d, expected %d", path, h[0],
                  RP_LLMC_MAGIC);
  }
  if (h[1] != RP_LLMC_VERSION_FP32)
    return rp_err(RP_EFORMAT, "'%s' is llm.c model version %d%s; ringpipe reads version %d (fp32): "
                  "export the fp32 file (e.g. gpt2_124M.bin, not gpt2_124M_bf16.bin)", path, h[1],
                  h[1] == 5 ? " (bf16)" : "", RP_LLMC_VERSION_FP32);
  cfg->T = h[2];
  cfg->V = h[3];
  cfg->L = h[4];
  cfg->NH = h[5];
  cfg->C = h[6];
  cfg->Vp = h[7];
  /* the same checks as the model options: sizes below overflow nothing after them */
  if (rp_gpt_config_validate(cfg) != RP_OK) {
    char why[300];
    snprintf(why, sizeof why, "%s", rp_errmsg());
    return rp_err(RP_EFORMAT, "'%s' has an invalid config (maxT=%d V=%d L=%d NH=%d C=%d Vp=%d: "
                  "%s); the file is corrupt", path, cfg->T, cfg->V, cfg->L, cfg->NH, cfg->C,
                  cfg->Vp, why);
  }
  if (cfg->Vp > cfg->V + 4096)
    return rp_err(RP_EFORMAT, "'%s' pads its vocabulary of %d to %d rows; llm.c pads by less "
                  "than 128: the header is corrupt", path, cfg->V, cfg->Vp);
  size_t off[LLMC_NKINDS + 1];
  kind_offsets(cfg, off);
  uint64_t want = sizeof h + (uint64_t)off[LLMC_NKINDS] * sizeof(float);
  if ((uint64_t)st.st_size != want)
    return rp_err(RP_EFORMAT, "'%s' %s: its config needs %llu bytes but the file has %lld", path,
                  (uint64_t)st.st_size < want ? "is truncated" : "has extra bytes",
                  (unsigned long long)want, (long long)st.st_size);
  return RP_OK;
}

rp_status rp_llmc_read_config(const char *path, rp_gpt_config *cfg) {
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    return rp_err(RP_EIO, "cannot open '%s' (not a checkpoint directory, so read as an llm.c "
                  "model file): %s; pass a checkpoint directory (e.g. runs/default/ckpt) or an "
                  "llm.c model .bin", path, strerror(errno));
  rp_status s = read_header(fd, path, cfg);
  close(fd);
  return s;
}

rp_status rp_llmc_load(const char *path, rp_chunk *chunk) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return rp_err(RP_EIO, "cannot open llm.c model '%s': %s", path, strerror(errno));
  rp_gpt_config fc;
  const rp_gpt_config *cc = &chunk->cfg;
  rp_status s = read_header(fd, path, &fc);
  if (s == RP_OK && (fc.L != cc->L || fc.C != cc->C || fc.NH != cc->NH || fc.T != cc->T ||
                     fc.V != cc->V || fc.Vp != cc->Vp))
    s = rp_err(RP_EINVAL, "'%s' holds a model with L=%d C=%d NH=%d T=%d V=%d Vp=%d but this run "
               "asks for L=%d C=%d NH=%d T=%d V=%d Vp=%d; use the file's config", path, fc.L, fc.C,
               fc.NH, fc.T, fc.V, fc.Vp, cc->L, cc->C, cc->NH, cc->T, cc->V, cc->Vp);
  size_t off[LLMC_NKINDS + 1];
  kind_offsets(&fc, off);
  for (int i = 0; s == RP_OK && i < chunk->num_tensors; i++) {
    const rp_tensor *t = &chunk->tensors[i];
    int layer, k = name_kind(t->name, &layer);
    if (k < 0 || (is_layer_kind(k) && (layer < 0 || layer >= fc.L))) {
      s = rp_err(RP_EINTERNAL, "tensor '%s' has no place in an llm.c model file", t->name);
      break;
    }
    if (t->numel != kind_size(&fc, k)) {
      s = rp_err(RP_EINTERNAL, "tensor '%s' has %zu floats; llm.c stores %zu", t->name, t->numel,
                 kind_size(&fc, k));
      break;
    }
    size_t at = off[k] + (is_layer_kind(k) ? (size_t)layer * kind_size(&fc, k) : 0);
    s = rp_io_pread(fd, chunk->params + t->offset, t->numel * sizeof(float),
                    (off_t)(1024 + at * sizeof(float)), path);
  }
  close(fd);
  return s;
}

static const rp_tensor *find_tensor(const rp_chunk *c, const char *name) {
  for (int i = 0; i < c->num_tensors; i++)
    if (!strcmp(c->tensors[i].name, name)) return &c->tensors[i];
  return NULL;
}

rp_status rp_llmc_save(const char *path, const rp_chunk *m) {
  const rp_gpt_config *c = &m->cfg;
  if (m->spec.first_layer != 0 || m->spec.num_layers != c->L || !m->spec.has_embed ||
      !m->spec.has_head)
    return rp_err(RP_EINVAL, "llm.c model files hold the whole model; this chunk has layers "
                  "[%d, %d) of %d%s%s", m->spec.first_layer, m->spec.first_layer + m->spec.num_layers,
                  c->L, m->spec.has_embed ? "" : ", no embeddings", m->spec.has_head ? "" : ", no head");
  int32_t h[256] = {0};
  h[0] = RP_LLMC_MAGIC;
  h[1] = RP_LLMC_VERSION_FP32;
  h[2] = c->T;
  h[3] = c->V;
  h[4] = c->L;
  h[5] = c->NH;
  h[6] = c->C;
  h[7] = c->Vp;
  rp_io_afile f;
  RP_TRY(rp_io_afile_open(&f, path));
  rp_status s = rp_io_afile_write(&f, h, sizeof h);
  for (int k = 0; k < LLMC_NKINDS && s == RP_OK; k++) {
    int nl = is_layer_kind(k) ? c->L : 1;
    for (int l = 0; l < nl && s == RP_OK; l++) {
      char name[64];
      if (is_layer_kind(k))
        snprintf(name, sizeof name, "h.%d.%s", l, kind_suffix[k]);
      else
        snprintf(name, sizeof name, "%s", kind_suffix[k]);
      const rp_tensor *t = find_tensor(m, name);
      if (!t || t->numel != kind_size(c, k))
        s = rp_err(RP_EINTERNAL, "chunk lacks tensor '%s' of %zu floats", name, kind_size(c, k));
      else
        s = rp_io_afile_write(&f, m->params + t->offset, t->numel * sizeof(float));
    }
  }
  if (s != RP_OK) {
    rp_io_afile_abort(&f);
    return s;
  }
  return rp_io_afile_commit(&f);
}

static int path_is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A directory is a ringpipe checkpoint or a Hugging Face folder (config.json
 * without meta.json), anything else an llm.c model file. */
rp_status rp_load_weights(rp_chunk *m, const char *path) {
  if (!path_is_dir(path)) return rp_llmc_load(path, m);
  if (rp_hf_is_folder(path)) return rp_hf_load(path, m);
  rp_ckpt_load_part part = {.chunk = m};
  return rp_ckpt_load(path, &part, 1);
}
