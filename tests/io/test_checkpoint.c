/* Checkpoints: safetensors layout per the spec, bitwise round trips (incl.
 * transposed Conv1D weights and optimizer state), split-stage <-> whole-model
 * loading, atomic overwrite, clear errors on broken files; llm.c model files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "io_test_util.h"
#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_checkpoint.h"
#include "ringpipe/rp_model.h"
#include "ringpipe/rp_util.h"

static const rp_gpt_config tiny = {.L = 2, .C = 16, .NH = 2, .T = 8, .V = 40, .Vp = 64};
static const rp_stage_spec whole = {0, 2, 1, 1}, first = {0, 1, 1, 0}, last = {1, 1, 0, 1};
enum { NTENSORS = 2 + 12 * 2 + 2 };

static void expect_msg(const char *a, const char *b) {
  const char *m = rp_errmsg();
  if (!strstr(m, a) || (b && !strstr(m, b)))
    fail_msg("message '%s' lacks '%s' / '%s'", m, a, b ? b : "");
}

typedef struct {
  rp_chunk c;
  float *m, *v;
} model;

static void model_init(model *x, const rp_gpt_config *cfg, rp_stage_spec spec, uint64_t seed) {
  assert_int_equal(rp_chunk_init(&x->c, cfg, &spec), RP_OK);
  rp_chunk_init_weights(&x->c, seed);
  x->m = malloc(x->c.num_params * sizeof(float));
  x->v = malloc(x->c.num_params * sizeof(float));
  rp_rng r;
  rp_rng_seed(&r, seed * 31 + (uint64_t)spec.first_layer);
  for (size_t i = 0; i < x->c.num_params; i++) {
    x->m[i] = rp_rng_normal(&r);
    x->v[i] = rp_rng_uniform(&r);
  }
}

static void model_scramble(model *x) {  /* make sure a load really overwrites */
  for (size_t i = 0; i < x->c.num_params; i++) x->c.params[i] = x->m[i] = x->v[i] = 12345.f;
}

static void model_free(model *x) {
  rp_chunk_free(&x->c);
  free(x->m);
  free(x->v);
}

static const float *tensor_of(const rp_chunk *c, const float *base, const char *name,
                              const rp_tensor **t) {
  *t = rp_chunk_find(c, name);
  assert_non_null(*t);
  return base + (*t)->offset;
}

/* Every tensor of `a` equals the same-named tensor of `b`, bitwise. */
static void expect_same(const rp_chunk *a, const float *abase, const rp_chunk *b,
                        const float *bbase) {
  for (int i = 0; i < a->num_tensors; i++) {
    const rp_tensor *ta = &a->tensors[i], *tb;
    const float *pb = tensor_of(b, bbase, ta->name, &tb);
    assert_int_equal(ta->numel, tb->numel);
    for (size_t k = 0; k < ta->numel; k++)
      if (memcmp(abase + ta->offset + k, pb + k, sizeof(float)))
        fail_msg("tensor %s differs at %zu: %g vs %g", ta->name, k, abase[ta->offset + k], pb[k]);
  }
}

static void save(const char *dir, const model *parts, int n, int with_optim, const char *meta) {
  rp_ckpt_part p[4];
  for (int i = 0; i < n; i++) {
    p[i].chunk = &parts[i].c;
    p[i].m = with_optim ? parts[i].m : NULL;
    p[i].v = with_optim ? parts[i].v : NULL;
  }
  rp_status s = rp_ckpt_save(dir, p, n, meta);
  if (s != RP_OK) fail_msg("save failed: %s", rp_errmsg());
}

static rp_status load(const char *dir, model *parts, int n, int with_optim) {
  rp_ckpt_load_part p[4];
  for (int i = 0; i < n; i++) {
    p[i].chunk = &parts[i].c;
    p[i].m = with_optim ? parts[i].m : NULL;
    p[i].v = with_optim ? parts[i].v : NULL;
  }
  return rp_ckpt_load(dir, p, n);
}

static unsigned char *slurp(const char *path, long *n) {
  *n = io_file_size(path);
  assert_true(*n >= 0);
  unsigned char *b = malloc((size_t)*n + 1);
  FILE *f = fopen(path, "rb");
  assert_int_equal(fread(b, 1, (size_t)*n, f), (size_t)*n);
  fclose(f);
  return b;
}

/* ---- the file itself follows the safetensors spec */
static void test_safetensors_format(void **state) {
  (void)state;
  char *dir = io_tmpdir(), *ck = io_path(dir, "ck");
  model w;
  model_init(&w, &tiny, whole, 3);
  save(ck, &w, 1, 1, "\"step\":7");
  char *mp = io_path(ck, "model.safetensors");
  long fsz;
  unsigned char *b = slurp(mp, &fsz);
  uint64_t N = 0;
  for (int i = 7; i >= 0; i--) N = N << 8 | b[i];  /* u64 little-endian */
  assert_true(N > 0 && 8 + N <= (uint64_t)fsz);
  assert_int_equal(N % 8, 0);
  char *hdr = malloc(N + 1);
  memcpy(hdr, b + 8, N);
  hdr[N] = '\0';
  size_t end = strlen(hdr);
  while (end > 0 && hdr[end - 1] == ' ') end--;
  assert_int_equal(hdr[end - 1], '}');  /* padding is spaces only */
  assert_int_equal(rp_json_validate(hdr), RP_OK);
  assert_int_equal(hdr[0], '{');
  char fmt[16];
  assert_int_equal(rp_json_get_string(hdr, "__metadata__.format", fmt, sizeof fmt), RP_OK);
  assert_string_equal(fmt, "pt");

  /* entries: F32, shape, offsets contiguous from 0 to the end of the file */
  rp_json_iter it;
  char key[128];
  const char *v;
  size_t vl;
  int count = 0;
  uint64_t data_len = (uint64_t)fsz - 8 - N;
  char *covered = calloc(data_len, 1);
  assert_int_equal(rp_json_iter_begin(&it, hdr), RP_OK);
  while (rp_json_iter_next(&it, key, sizeof key, &v, &vl) == 1) {
    if (!strcmp(key, "__metadata__")) continue;
    char *e = strndup(v, vl);
    char dt[8];
    int64_t s0, s1 = 1, ob, oe;
    assert_int_equal(rp_json_get_string(e, "dtype", dt, sizeof dt), RP_OK);
    assert_string_equal(dt, "F32");
    assert_int_equal(rp_json_get_int64(e, "shape.0", &s0), RP_OK);
    if (rp_json_get_int64(e, "shape.1", &s1) != RP_OK) s1 = 1;
    assert_int_equal(rp_json_get_int64(e, "data_offsets.0", &ob), RP_OK);
    assert_int_equal(rp_json_get_int64(e, "data_offsets.1", &oe), RP_OK);
    assert_int_equal(oe - ob, s0 * s1 * 4);
    assert_true(oe <= (int64_t)data_len);
    for (int64_t k = ob; k < oe; k++) {
      assert_int_equal(covered[k], 0);  /* no overlap */
      covered[k] = 1;
    }
    if (!strcmp(key, "wte.weight")) assert_true(s0 == tiny.V && s1 == tiny.C);
    if (!strcmp(key, "wpe.weight")) assert_true(s0 == tiny.T && s1 == tiny.C);
    if (!strcmp(key, "h.0.attn.c_attn.weight")) assert_true(s0 == tiny.C && s1 == 3 * tiny.C);
    if (!strcmp(key, "h.1.attn.c_proj.weight")) assert_true(s0 == tiny.C && s1 == tiny.C);
    if (!strcmp(key, "h.0.mlp.c_fc.weight")) assert_true(s0 == tiny.C && s1 == 4 * tiny.C);
    if (!strcmp(key, "h.1.mlp.c_proj.weight")) assert_true(s0 == 4 * tiny.C && s1 == tiny.C);
    if (!strcmp(key, "h.1.attn.c_attn.bias")) assert_true(s0 == 3 * tiny.C);
    /* HF Conv1D layout: file[i][j] = ours[j][i] */
    if (!strcmp(key, "h.1.mlp.c_fc.weight")) {
      const float *fw = w.c.p.layer[1].fcw;  /* ours (4C, C) */
      for (int i = 0; i < tiny.C; i++)
        for (int j = 0; j < 4 * tiny.C; j++) {
          float x;
          memcpy(&x, b + 8 + N + ob + ((size_t)i * 4 * tiny.C + j) * 4, 4);
          assert_memory_equal(&x, &fw[j * tiny.C + i], 4);
        }
    }
    if (!strcmp(key, "wte.weight"))
      assert_memory_equal(b + 8 + N + ob, w.c.p.wte, (size_t)tiny.V * tiny.C * 4);
    free(e);
    count++;
  }
  assert_int_equal(count, NTENSORS);
  for (uint64_t k = 0; k < data_len; k++)
    if (!covered[k]) fail_msg("data byte %llu is not covered by any tensor", (unsigned long long)k);
  /* our reader agrees */
  rp_st_file sf;
  assert_int_equal(rp_st_open(&sf, mp), RP_OK);
  assert_int_equal(sf.n, NTENSORS);
  const rp_st_entry *qe = rp_st_find(&sf, "h.0.attn.c_attn.weight");
  assert_non_null(qe);
  assert_int_equal(qe->ndim, 2);
  assert_int_equal(qe->shape[1], 3 * tiny.C);
  assert_null(rp_st_find(&sf, "h.9.ln_1.weight"));
  rp_st_close(&sf);

  char *meta;
  assert_int_equal(rp_ckpt_read_meta(ck, &meta), RP_OK);
  double step;
  assert_int_equal(rp_json_get_number(meta, "step", &step), RP_OK);
  assert_true(step == 7);
  char f2[64];
  assert_int_equal(rp_json_get_string(meta, "format", f2, sizeof f2), RP_OK);
  assert_string_equal(f2, "ringpipe-checkpoint");
  free(meta);
  free(covered);
  free(hdr);
  free(b);
  free(mp);
  model_free(&w);
  io_rmtree(dir);
  free(ck);
  free(dir);
}

static void test_roundtrip_whole(void **state) {
  (void)state;
  char *dir = io_tmpdir(), *ck = io_path(dir, "a/b/ckpt");
  model w, r;
  model_init(&w, &tiny, whole, 5);
  model_init(&r, &tiny, whole, 6);
  model_scramble(&r);
  save(ck, &w, 1, 1, "{\"step\":1,\"config\":{\"L\":2,\"C\":16},\"rng\":[1,2]}");
  assert_int_equal(load(ck, &r, 1, 1), RP_OK);
  assert_memory_equal(w.c.params, r.c.params, w.c.num_params * sizeof(float));  /* incl. pad rows */
  assert_memory_equal(w.m, r.m, w.c.num_params * sizeof(float));
  assert_memory_equal(w.v, r.v, w.c.num_params * sizeof(float));
  char *meta;
  assert_int_equal(rp_ckpt_read_meta(ck, &meta), RP_OK);
  double L;
  assert_int_equal(rp_json_get_number(meta, "config.L", &L), RP_OK);
  assert_true(L == 2);
  free(meta);
  /* weights only: m/v untouched */
  model_scramble(&r);
  assert_int_equal(load(ck, &r, 1, 0), RP_OK);
  assert_memory_equal(w.c.params, r.c.params, w.c.num_params * sizeof(float));
  assert_true(r.m[0] == 12345.f);
  model_free(&w);
  model_free(&r);
  io_rmtree(dir);
  free(ck);
  free(dir);
}

static void test_split_stages(void **state) {
  (void)state;
  char *dir = io_tmpdir(), *ck1 = io_path(dir, "split"), *ck2 = io_path(dir, "whole");
  model w, a, b;
  model_init(&w, &tiny, whole, 9);
  model_init(&a, &tiny, first, 9);  /* seed-stable init: a slice of w */
  model_init(&b, &tiny, last, 9);
  /* in a real pipeline both copies of the tied wte get the same update */
  const rp_tensor *wa = rp_chunk_find(&a.c, "wte.weight"), *wb = rp_chunk_find(&b.c, "wte.weight");
  memcpy(b.m + wb->offset, a.m + wa->offset, wa->numel * sizeof(float));
  memcpy(b.v + wb->offset, a.v + wa->offset, wa->numel * sizeof(float));
  /* two-part save (tied wte in both parts, written once) -> one whole chunk */
  model parts[2] = {a, b};
  save(ck1, parts, 2, 1, "\"step\":2");
  char *mp = io_path(ck1, "model.safetensors");
  rp_st_file sf;
  assert_int_equal(rp_st_open(&sf, mp), RP_OK);
  assert_int_equal(sf.n, NTENSORS);
  rp_st_close(&sf);
  free(mp);
  model r;
  model_init(&r, &tiny, whole, 1);
  model_scramble(&r);
  assert_int_equal(load(ck1, &r, 1, 1), RP_OK);
  expect_same(&w.c, w.c.params, &r.c, r.c.params);
  expect_same(&a.c, a.m, &r.c, r.m);  /* optimizer state from each part */
  expect_same(&b.c, b.v, &r.c, r.v);
  expect_same(&a.c, a.v, &r.c, r.v);
  /* whole save -> two parts; wte lands in both */
  save(ck2, &w, 1, 1, "");
  model ra, rb;
  model_init(&ra, &tiny, first, 2);
  model_init(&rb, &tiny, last, 2);
  model_scramble(&ra);
  model_scramble(&rb);
  model rparts[2] = {ra, rb};
  assert_int_equal(load(ck2, rparts, 2, 1), RP_OK);
  expect_same(&ra.c, ra.c.params, &w.c, w.c.params);
  expect_same(&rb.c, rb.c.params, &w.c, w.c.params);
  expect_same(&ra.c, ra.m, &w.c, w.m);
  expect_same(&rb.c, rb.v, &w.c, w.v);
  assert_non_null(rb.c.p.wte);
  assert_memory_equal(rb.c.p.wte, w.c.p.wte, (size_t)tiny.Vp * tiny.C * 4);
  model_free(&w);
  model_free(&a);
  model_free(&b);
  model_free(&r);
  model_free(&ra);
  model_free(&rb);
  io_rmtree(dir);
  free(ck1);
  free(ck2);
  free(dir);
}

static void test_overwrite(void **state) {
  (void)state;
  char *dir = io_tmpdir(), *ck = io_path(dir, "ck");
  model w1, w2, r;
  model_init(&w1, &tiny, whole, 1);
  model_init(&w2, &tiny, whole, 2);
  model_init(&r, &tiny, whole, 3);
  save(ck, &w1, 1, 1, "\"step\":1");
  save(ck, &w2, 1, 1, "\"step\":2");  /* over a complete checkpoint: temp dir + swap */
  char *meta;
  assert_int_equal(rp_ckpt_read_meta(ck, &meta), RP_OK);
  double step;
  assert_int_equal(rp_json_get_number(meta, "step", &step), RP_OK);
  assert_true(step == 2);
  free(meta);
  assert_int_equal(load(ck, &r, 1, 1), RP_OK);
  assert_memory_equal(r.c.params, w2.c.params, w2.c.num_params * 4);
  assert_memory_equal(r.v, w2.v, w2.c.num_params * 4);
  /* nothing but the checkpoint is left in the parent directory */
  DIR *d = opendir(dir);
  struct dirent *e;
  int entries = 0;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      assert_string_equal(e->d_name, "ck");
      entries++;
    }
  closedir(d);
  assert_int_equal(entries, 1);
  /* saving without optimizer state drops the old optim file */
  save(ck, &w1, 1, 0, "\"step\":3");
  assert_int_equal(load(ck, &r, 1, 1), RP_EIO);
  expect_msg("optim.safetensors", "without optimizer state");
  assert_int_equal(load(ck, &r, 1, 0), RP_OK);
  assert_memory_equal(r.c.params, w1.c.params, w1.c.num_params * 4);
  /* an interrupted save (no meta.json) is refused, then completed in place */
  char *mj = io_path(ck, "meta.json");
  unlink(mj);
  assert_int_equal(load(ck, &r, 1, 0), RP_EIO);
  expect_msg("meta.json is missing", "interrupted");
  assert_int_equal(rp_ckpt_read_meta(ck, &meta), RP_EIO);
  save(ck, &w2, 1, 1, "\"step\":4");
  assert_int_equal(load(ck, &r, 1, 1), RP_OK);
  assert_memory_equal(r.c.params, w2.c.params, w2.c.num_params * 4);
  /* never swap away a directory of other files */
  char *foreign = io_path(dir, "notes"), *ff = io_path(foreign, "todo.txt");
  mkdir(foreign, 0777);
  io_write_file(ff, "x", 1);
  rp_ckpt_part p = {&w1.c, NULL, NULL};
  assert_int_equal(rp_ckpt_save(foreign, &p, 1, ""), RP_EINVAL);
  expect_msg("todo.txt", NULL);
  assert_int_equal(io_file_size(ff), 1);
  /* bad metadata is refused before anything is written */
  char *fresh = io_path(dir, "fresh");
  assert_int_equal(rp_ckpt_save(fresh, &p, 1, "\"step\":"), RP_EINVAL);
  expect_msg("metadata", NULL);
  free(fresh);
  free(foreign);
  free(ff);
  free(mj);
  model_free(&w1);
  model_free(&w2);
  model_free(&r);
  io_rmtree(dir);
  free(ck);
  free(dir);
}

static void test_broken_files(void **state) {
  (void)state;
  char *dir = io_tmpdir(), *ck = io_path(dir, "ck");
  model w, r;
  model_init(&w, &tiny, whole, 4);
  model_init(&r, &tiny, whole, 4);
  assert_int_equal(load("/nonexistent/ckpt", &r, 1, 0), RP_EIO);
  expect_msg("/nonexistent/ckpt", "does not exist");
  save(ck, &w, 1, 1, "\"step\":1");
  char *mp = io_path(ck, "model.safetensors");
  long n;
  unsigned char *orig = slurp(mp, &n);
  /* truncated data section */
  io_write_file(mp, orig, (size_t)n - 100);
  assert_int_equal(load(ck, &r, 1, 0), RP_EFORMAT);
  expect_msg("truncated", "model.safetensors");
  /* truncated inside the header */
  io_write_file(mp, orig, 40);
  assert_int_equal(load(ck, &r, 1, 0), RP_EFORMAT);
  expect_msg("header length", NULL);
  io_write_file(mp, orig, 3);
  assert_int_equal(load(ck, &r, 1, 0), RP_EFORMAT);
  expect_msg("too small", NULL);
  /* corrupt JSON */
  unsigned char *bad = malloc((size_t)n);
  memcpy(bad, orig, (size_t)n);
  bad[8] = 'x';
  io_write_file(mp, bad, (size_t)n);
  assert_int_equal(load(ck, &r, 1, 0), RP_EFORMAT);
  expect_msg("not valid JSON", NULL);
  /* a header length pointing far past the file */
  memcpy(bad, orig, (size_t)n);
  bad[6] = 0x7f;
  io_write_file(mp, bad, (size_t)n);
  assert_int_equal(load(ck, &r, 1, 0), RP_EFORMAT);
  /* corrupt data_offsets: shape and byte range disagree */
  memcpy(bad, orig, (size_t)n);
  char *dof = strstr((char *)bad + 8, "\"data_offsets\":[0,");
  assert_non_null(dof);
  dof[16] = '4';
  io_write_file(mp, bad, (size_t)n);
  assert_int_equal(load(ck, &r, 1, 0), RP_EFORMAT);
  expect_msg("corrupt", NULL);
  io_write_file(mp, orig, (size_t)n);
  assert_int_equal(load(ck, &r, 1, 1), RP_OK);
  /* missing model file */
  unlink(mp);
  assert_int_equal(load(ck, &r, 1, 0), RP_EIO);
  expect_msg("model.safetensors", NULL);
  io_write_file(mp, orig, (size_t)n);
  /* config mismatches name the tensor, both shapes and the fix */
  rp_gpt_config wide = tiny;
  wide.C = 32;
  model x;
  model_init(&x, &wide, whole, 1);
  assert_int_equal(load(ck, &x, 1, 0), RP_EINVAL);
  expect_msg("'wte.weight' is [40, 16]", "needs [40, 32]");
  expect_msg("config", NULL);
  model_free(&x);
  rp_gpt_config deep = tiny;
  deep.L = 3;
  rp_stage_spec all3 = {0, 3, 1, 1};
  model_init(&x, &deep, all3, 1);
  assert_int_equal(load(ck, &x, 1, 0), RP_EINVAL);
  expect_msg("no tensor 'h.2.ln_1.weight'", "holds 2 layers");
  model_free(&x);
  /* corrupt optimizer file */
  char *op = io_path(ck, "optim.safetensors");
  long on;
  unsigned char *oo = slurp(op, &on);
  io_write_file(op, oo, (size_t)on / 2);
  assert_int_equal(load(ck, &r, 1, 1), RP_EFORMAT);
  expect_msg("optim.safetensors", "truncated");
  /* corrupt meta.json */
  char *mj = io_path(ck, "meta.json");
  io_write_file(mj, "{\"format\":", 10);
  assert_int_equal(load(ck, &r, 1, 0), RP_EFORMAT);
  expect_msg("meta.json", NULL);
  io_write_file(mj, "{\"format\":\"other\"}", 18);
  assert_int_equal(load(ck, &r, 1, 0), RP_EFORMAT);
  expect_msg("not ringpipe checkpoint metadata", NULL);
  free(mj);
  free(oo);
  free(op);
  free(bad);
  free(orig);
  free(mp);
  model_free(&w);
  model_free(&r);
  io_rmtree(dir);
  free(ck);
  free(dir);
}

/* A file written the way other tools do: HF-style "transformer." prefix,
 * different tensor order, extra tensors, an unpadded header. */
static void test_foreign_safetensors(void **state) {
  (void)state;
  char *dir = io_tmpdir(), *ck = io_path(dir, "ck");
  model w, r;
  model_init(&w, &tiny, whole, 8);
  model_init(&r, &tiny, whole, 1);
  save(ck, &w, 1, 0, "\"step\":0");
  char *mp = io_path(ck, "model.safetensors");
  rp_st_file sf;
  assert_int_equal(rp_st_open(&sf, mp), RP_OK);
  /* rebuild: reversed order, prefixed names, one extra tensor, no padding */
  char *hdr = malloc(1 << 16);
  size_t hl = 0;
  uint64_t off = 0;
  hl += (size_t)sprintf(hdr + hl, "{\"extra.bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}");
  off = 4;
  for (int i = sf.n - 1; i >= 0; i--) {
    const rp_st_entry *e = &sf.entries[i];
    uint64_t nb = e->end - e->begin;
    hl += (size_t)sprintf(hdr + hl, ",\"transformer.%s\":{\"data_offsets\":[%llu,%llu],\"shape\":[%lld",
                          e->name, (unsigned long long)off, (unsigned long long)(off + nb),
                          (long long)e->shape[0]);
    if (e->ndim == 2) hl += (size_t)sprintf(hdr + hl, ",%lld", (long long)e->shape[1]);
    hl += (size_t)sprintf(hdr + hl, "],\"dtype\":\"F32\"}");
    off += nb;
  }
  hl += (size_t)sprintf(hdr + hl, ",\"__metadata__\":{\"format\":\"pt\"}}");
  char *np = io_path(ck, "new.bin");  /* not over the file being read */
  FILE *f = fopen(np, "wb");
  uint64_t le = hl;
  fwrite(&le, 8, 1, f);
  fwrite(hdr, 1, hl, f);
  float extra = 1.f;
  fwrite(&extra, 4, 1, f);
  for (int i = sf.n - 1; i >= 0; i--) {
    const rp_st_entry *e = &sf.entries[i];
    size_t nb = (size_t)(e->end - e->begin);
    char *buf = malloc(nb);
    assert_int_equal(rp_st_read(&sf, e, 0, buf, nb), RP_OK);
    fwrite(buf, 1, nb, f);
    free(buf);
  }
  rp_st_close(&sf);
  fclose(f);
  assert_int_equal(rename(np, mp), 0);
  free(np);
  if (load(ck, &r, 1, 0) != RP_OK) fail_msg("%s", rp_errmsg());
  assert_memory_equal(r.c.params, w.c.params, w.c.num_params * 4);
  free(hdr);
  free(mp);
  model_free(&w);
  model_free(&r);
  io_rmtree(dir);
  free(ck);
  free(dir);
}

/* ---- llm.c model files */
static void test_llmc(void **state) {
  (void)state;
  char *dir = io_tmpdir(), *p = io_path(dir, "gpt2_tiny.bin");
  model w, r, b;
  model_init(&w, &tiny, whole, 12);
  assert_int_equal(rp_llmc_save(p, &w.c), RP_OK);
  const rp_gpt_config *c = &tiny;
  size_t C = c->C, L = c->L;
  size_t total = c->Vp * C + c->T * C + L * (12 * C * C + 13 * C) + 2 * C;
  assert_int_equal(io_file_size(p), 1024 + 4 * (long)total);
  long n;
  unsigned char *raw = slurp(p, &n);
  int32_t h[8];
  memcpy(h, raw, sizeof h);
  int32_t want[8] = {20240326, 3, c->T, c->V, c->L, c->NH, c->C, c->Vp};
  assert_memory_equal(h, want, sizeof want);
  /* llm.c order: all qkvw blocks come after wte, wpe, ln1w[L], ln1b[L] */
  size_t qkv1 = c->Vp * C + c->T * C + 2 * L * C + 1 * 3 * C * C;
  assert_memory_equal(raw + 1024 + 4 * qkv1, w.c.p.layer[1].qkvw, 3 * C * C * 4);
  size_t fcproj0 = c->Vp * C + c->T * C + L * (2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C +
                                               4 * C * C + 4 * C);
  assert_memory_equal(raw + 1024 + 4 * fcproj0, w.c.p.layer[0].fcprojw, 4 * C * C * 4);
  free(raw);
  rp_gpt_config got;
  assert_int_equal(rp_llmc_read_config(p, &got), RP_OK);
  assert_memory_equal(&got, &tiny, sizeof got);
  model_init(&r, &tiny, whole, 1);
  model_scramble(&r);
  assert_int_equal(rp_llmc_load(p, &r.c), RP_OK);
  assert_memory_equal(r.c.params, w.c.params, w.c.num_params * 4);
  model_init(&b, &tiny, last, 1);
  assert_int_equal(rp_llmc_load(p, &b.c), RP_OK);
  expect_same(&b.c, b.c.params, &w.c, w.c.params);
  /* llm.c -> checkpoint -> back, bitwise */
  char *ck = io_path(dir, "ck");
  save(ck, &r, 1, 0, "");
  model_scramble(&r);
  assert_int_equal(load(ck, &r, 1, 0), RP_OK);
  assert_memory_equal(r.c.params, w.c.params, w.c.num_params * 4);
  /* errors */
  assert_int_equal(rp_llmc_save(p, &b.c), RP_EINVAL);
  rp_gpt_config other = tiny;
  other.NH = 4;
  model x;
  model_init(&x, &other, whole, 1);
  assert_int_equal(rp_llmc_load(p, &x.c), RP_EINVAL);
  expect_msg("NH=2", "NH=4");
  model_free(&x);
  unsigned char *orig = slurp(p, &n);
  io_write_file(p, orig, (size_t)n - 4);
  assert_int_equal(rp_llmc_load(p, &r.c), RP_EFORMAT);
  expect_msg("truncated", NULL);
  int32_t v5 = 5;
  memcpy(orig + 4, &v5, 4);
  io_write_file(p, orig, (size_t)n);
  assert_int_equal(rp_llmc_read_config(p, &got), RP_EFORMAT);
  expect_msg("bf16", NULL);
  assert_int_equal(rp_llmc_read_config("/nonexistent/m.bin", &got), RP_EIO);
  free(orig);
  free(ck);
  model_free(&w);
  model_free(&r);
  model_free(&b);
  io_rmtree(dir);
  free(p);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_safetensors_format), cmocka_unit_test(test_roundtrip_whole),
      cmocka_unit_test(test_split_stages),       cmocka_unit_test(test_overwrite),
      cmocka_unit_test(test_broken_files),       cmocka_unit_test(test_foreign_safetensors),
      cmocka_unit_test(test_llmc),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
