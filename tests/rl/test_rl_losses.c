/* RL losses: the clipped objective on hand-worked cases; GRPO and PPO
 * per-token gradients w.r.t. logits against central finite differences of a
 * double-precision log-softmax; the value loss gradient; GAE by hand; k3 KL
 * (>= 0, exactly 0 at equality); group advantages (sum 0, Dr. GRPO variant,
 * zero-std groups); aggregation weights; the on-policy first pass (ratio 1,
 * no clipping); the head backward from given dlogits against the model's own;
 * and the whole-model gradient of one GRPO / PPO optimisation pass (value
 * head included) against directional finite differences. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "rl/rl_internal.h"
#include "ringpipe/rp_arena.h"
#include "ringpipe/rp_kernels.h"
#include "ringpipe/rp_grid.h"
#include "ringpipe/rp_rl.h"

enum { V = 13, VP = 64, K = 8 };

static double logsoftmax_d(const double *z, int n, int t, double tau) {
  double mx = -INFINITY, s = 0;
  for (int i = 0; i < n; i++) mx = fmax(mx, z[i] / tau);
  for (int i = 0; i < n; i++) s += exp(z[i] / tau - mx);
  return z[t] / tau - mx - log(s);
}

static void test_pg_formula(void **state) {
  (void)state;
  rp_pg_params p = {.clip_low = 0.2f, .clip_high = 0.2f, .beta = 0};
  rp_pg_token o;
  /* r = 1.5, A = 1: clipped at 1.2 */
  rp_pg_token_loss(log(1.5), 0, 0, 1.0, &p, &o);
  assert_true(fabs(o.loss + 1.2) < 1e-6 && o.clipped && o.dlogp == 0.0);
  /* r = 0.5, A = 1: min picks the unclipped 0.5 */
  rp_pg_token_loss(log(0.5), 0, 0, 1.0, &p, &o);
  assert_true(fabs(o.loss + 0.5) < 1e-6 && !o.clipped && fabs(o.dlogp + 0.5) < 1e-6);
  /* r = 0.5, A = -1: clipped at 0.8 */
  rp_pg_token_loss(log(0.5), 0, 0, -1.0, &p, &o);
  assert_true(fabs(o.loss - 0.8) < 1e-6 && o.clipped);
  /* r = 1.5, A = -1: unclipped, loss 1.5 */
  rp_pg_token_loss(log(1.5), 0, 0, -1.0, &p, &o);
  assert_true(fabs(o.loss - 1.5) < 1e-6 && !o.clipped && fabs(o.dlogp - 1.5) < 1e-6);
  /* clip-higher: r = 1.25 stays unclipped with clip_high 0.28 */
  rp_pg_params ph = {.clip_low = 0.2f, .clip_high = 0.28f};
  rp_pg_token_loss(log(1.25), 0, 0, 1.0, &ph, &o);
  assert_true(fabs(o.loss + 1.25) < 1e-6 && !o.clipped);
  rp_pg_token_loss(log(1.25), 0, 0, 1.0, &p, &o);
  assert_true(fabs(o.loss + 1.2) < 1e-6 && o.clipped);
  /* k3 term: beta * (e^(ref-logp) - (ref-logp) - 1) */
  rp_pg_params pk = {.clip_low = 0.2f, .clip_high = 0.2f, .beta = 0.5f};
  rp_pg_token_loss(-1.0, -1.0, -1.5, 0.0, &pk, &o);
  double k3 = exp(-0.5) + 0.5 - 1;
  assert_true(fabs(o.loss - 0.5 * k3) < 1e-9 && fabs(o.kl - k3) < 1e-12);
  assert_true(fabs(o.dlogp - 0.5 * (1 - exp(-0.5))) < 1e-9);
}

/* Sum over K tokens of w_k * token loss, with logits perturbed in double. */
typedef struct {
  float z[K][VP];
  int target[K];
  double old[K], ref[K], adv[K], w[K];
  rp_pg_params p;
  float tau;
} pg_case;

static double case_loss(const pg_case *c, const double *zd /* K x V */) {
  double sum = 0;
  for (int k = 0; k < K; k++) {
    rp_pg_token o;
    double lp = logsoftmax_d(zd + k * V, V, c->target[k], c->tau);
    rp_pg_token_loss(lp, c->old[k], c->ref[k], c->adv[k], &c->p, &o);
    sum += c->w[k] * o.loss;
  }
  return sum;
}

/* Analytic dlogits (float path of the library) against central differences. */
static void check_case_fd(pg_case *c, int *nclipped) {
  double zd[K * V];
  for (int k = 0; k < K; k++)
    for (int i = 0; i < V; i++) zd[k * V + i] = c->z[k][i];
  *nclipped = 0;
  float g[K][VP];
  for (int k = 0; k < K; k++) {
    memcpy(g[k], c->z[k], sizeof g[k]);
    float lp = rp_logprob_row(g[k], V, c->target[k], c->tau);
    rp_pg_token o;
    rp_pg_token_loss(lp, c->old[k], c->ref[k], c->adv[k], &c->p, &o);
    *nclipped += o.clipped;
    rp_dlogits_from_dlogp(g[k], V, VP, c->target[k], c->tau, (float)(c->w[k] * o.dlogp));
    for (int i = V; i < VP; i++) assert_true(g[k][i] == 0.0f);
  }
  double maxfd = 0, fd[K * V];
  for (int j = 0; j < K * V; j++) {
    double keep = zd[j], h = 1e-5;
    zd[j] = keep + h;
    double lp = case_loss(c, zd);
    zd[j] = keep - h;
    double lm = case_loss(c, zd);
    zd[j] = keep;
    fd[j] = (lp - lm) / (2 * h);
    maxfd = fmax(maxfd, fabs(fd[j]));
  }
  assert_true(maxfd > 1e-3); /* the check has something to check */
  for (int j = 0; j < K * V; j++) {
    double got = g[j / V][j % V];
    if (fabs(got - fd[j]) > 1e-3 * fabs(fd[j]) + 1e-5 * maxfd)
      fail_msg("dlogits[%d][%d] = %.8g but finite difference %.8g", j / V, j % V, got, fd[j]);
  }
}

static void fill_case(pg_case *c, rp_rng *r, float tau) {
  memset(c, 0, sizeof *c);
  c->tau = tau;
  /* old log-probs offset from the current ones so that ratios land on both
   * sides of the clip range, never within 0.05 of its edges (no kink) */
  static const double off[K] = {0.0, 0.1, -0.1, 0.5, -0.5, 0.05, -0.35, 0.3};
  for (int k = 0; k < K; k++) {
    for (int i = 0; i < V; i++) c->z[k][i] = 2.0f * rp_rng_normal(r);
    for (int i = V; i < VP; i++) c->z[k][i] = 99.0f; /* padding must be ignored */
    c->target[k] = (int)rp_rng_below(r, V);
    double lp = rp_logprob_row(c->z[k], V, c->target[k], tau);
    c->old[k] = lp + off[k];
    c->ref[k] = lp + 0.3 * rp_rng_normal(r);
    c->adv[k] = (k % 2 ? -1.0 : 1.0) * (0.5 + rp_rng_uniform(r));
    c->w[k] = 0.05 + 0.1 * rp_rng_uniform(r);
  }
}

static void test_grpo_dlogits_fd(void **state) {
  (void)state;
  rp_rng r;
  rp_rng_seed(&r, 11);
  const float taus[2] = {1.0f, 0.7f};
  for (int it = 0; it < 2; it++) {
    pg_case c;
    fill_case(&c, &r, taus[it]);
    c.p = (rp_pg_params){.clip_low = 0.2f, .clip_high = 0.28f, .beta = 0.1f};
    int nclipped;
    check_case_fd(&c, &nclipped);
    assert_true(nclipped > 0 && nclipped < K); /* both branches exercised */
  }
}

/* PPO's policy part: per-token advantages from GAE over token rewards with a
 * KL penalty (no KL term in the loss). */
static void test_ppo_dlogits_fd(void **state) {
  (void)state;
  rp_rng r;
  rp_rng_seed(&r, 12);
  pg_case c;
  fill_case(&c, &r, 1.0f);
  c.p = (rp_pg_params){.clip_low = 0.2f, .clip_high = 0.2f, .beta = 0};
  float rew[K], val[K], adv[K], ret[K];
  for (int k = 0; k < K; k++) {
    rew[k] = (float)(-0.05 * (c.old[k] - c.ref[k]));
    val[k] = 0.3f * rp_rng_normal(&r);
  }
  rew[K - 1] += 1.0f;
  rp_gae(rew, val, K, 1.0f, 0.95f, adv, ret);
  for (int k = 0; k < K; k++) c.adv[k] = adv[k];
  int nclipped;
  check_case_fd(&c, &nclipped);
  assert_true(nclipped > 0 && nclipped < K);
}

static void test_value_loss(void **state) {
  (void)state;
  const float clip = 0.2f;
  /* v, v_old, return: inside the band, outside with the clipped term larger,
   * outside with the unclipped larger, and no clipping */
  const float cases[][3] = {{0.5f, 0.45f, 1.0f}, {0.9f, 0.3f, 0.0f}, {1.4f, 0.5f, 1.5f},
                            {-0.7f, 0.1f, 0.4f}, {1.3f, 1.0f, 1.1f}, {-0.5f, 0.2f, -1.0f}};
  int saw_clipped = 0;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    for (int c = 0; c < 2; c++) {
      float cl = c ? clip : 0.0f;
      double dv, a, b, d2;
      int clipped, c2;
      rp_value_loss(cases[i][0], cases[i][1], cases[i][2], cl, &dv, &clipped);
      saw_clipped += clipped;
      double h = 1e-3;
      a = rp_value_loss(cases[i][0] + (float)h, cases[i][1], cases[i][2], cl, &d2, &c2);
      b = rp_value_loss(cases[i][0] - (float)h, cases[i][1], cases[i][2], cl, &d2, &c2);
      double fd = (a - b) / (2 * h);
      if (fabs(fd - dv) > 1e-3 * fabs(fd) + 1e-4)
        fail_msg("value case %zu clip %g: dv %.6g vs finite difference %.6g", i, cl, dv, fd);
    }
  }
  assert_true(saw_clipped > 0);
  /* clipped value: v = 0.9, old 0.3, R = 0 -> max((0.9)^2, (0.5)^2)/2 */
  double dv;
  int clipped;
  double l = rp_value_loss(0.9f, 0.3f, 0.0f, clip, &dv, &clipped);
  assert_true(fabs(l - 0.5 * 0.81) < 1e-6 && !clipped);
  /* moved towards the return past the band: the clipped error 0.8 counts, dv 0 */
  l = rp_value_loss(1.4f, 0.5f, 1.5f, clip, &dv, &clipped);
  assert_true(fabs(l - 0.5 * 0.8 * 0.8) < 1e-6 && clipped && dv == 0.0);
}

static void test_gae_by_hand(void **state) {
  (void)state;
  const float rew[3] = {0, 0, 1}, val[3] = {0.5f, 0.2f, 0.1f};
  float adv[3], ret[3];
  rp_gae(rew, val, 3, 1.0f, 0.9f, adv, ret);
  /* delta = (-0.3, -0.1, 0.9); A2 = 0.9, A1 = -0.1 + 0.9 A2, A0 = -0.3 + 0.9 A1 */
  assert_true(fabs(adv[2] - 0.9) < 1e-6 && fabs(adv[1] - 0.71) < 1e-6);
  assert_true(fabs(adv[0] - 0.339) < 1e-6 && fabs(ret[0] - 0.839) < 1e-6);
  rp_gae(rew, val, 3, 1.0f, 1.0f, adv, ret); /* lambda 1: Monte Carlo return - value */
  for (int t = 0; t < 3; t++) assert_true(fabs(adv[t] - (1.0 - val[t])) < 1e-6 && ret[t] == 1.0f);
}

static void test_k3(void **state) {
  (void)state;
  rp_rng r;
  rp_rng_seed(&r, 3);
  for (int i = 0; i < 100000; i++) {
    double a = -10 * rp_rng_uniform(&r), b = a + pow(10, -8 * rp_rng_uniform(&r)) *
                                                   (rp_rng_uniform(&r) - 0.5);
    if (i % 3 == 0) b = -10 * rp_rng_uniform(&r);
    assert_true(rp_kl_k3(a, b) >= 0.0);
    assert_true(rp_kl_k3(a, a) == 0.0);
  }
  double x = 0.7;
  assert_true(fabs(rp_kl_k3(0.0, x) - (exp(x) - x - 1)) < 1e-12);
  /* a policy equal to the reference gives exactly 0 through the token loss too */
  rp_pg_params p = {.clip_low = 0.2f, .clip_high = 0.2f, .beta = 1.0f};
  rp_pg_token o;
  rp_pg_token_loss(-2.5, -2.5, -2.5, 0.7, &p, &o);
  assert_true(o.kl == 0.0);
}

static void test_group_advantages(void **state) {
  (void)state;
  rp_rng r;
  rp_rng_seed(&r, 4);
  for (int it = 0; it < 200; it++) {
    int G = 2 + (int)rp_rng_below(&r, 15);
    float rw[16], adv[16];
    for (int g = 0; g < G; g++) rw[g] = (rp_rng_below(&r, 3) == 0) ? 1.0f : 0.1f * (float)rp_rng_below(&r, 2);
    for (int scale = 0; scale < 2; scale++) {
      double std = rp_group_advantages(rw, G, scale, 1e-4f, adv);
      double sum = 0, sq = 0, mean = 0;
      for (int g = 0; g < G; g++) mean += rw[g] / (double)G;
      for (int g = 0; g < G; g++) {
        sum += adv[g];
        sq += (double)adv[g] * adv[g];
        if (!scale && std > 0) assert_true(fabs(adv[g] - (rw[g] - mean)) < 1e-6);
      }
      assert_true(fabs(sum) < 1e-5);
      if (std == 0.0) {
        for (int g = 0; g < G; g++) assert_true(adv[g] == 0.0f);
      } else if (scale) {
        /* sample std of the advantages ~ 1 (eps aside) */
        assert_true(fabs(sqrt(sq / (G - 1)) - std / (std + 1e-4)) < 1e-4);
      }
    }
  }
  float same[4] = {0.1f, 0.1f, 0.1f, 0.1f}, adv[4];
  assert_true(rp_group_advantages(same, 4, 1, 1e-4f, adv) == 0.0);
}

static void test_loss_aggregation(void **state) {
  (void)state;
  const int clen[5] = {1, 4, 2, 7, 3};
  const long nseq = 5, ntok = 17;
  const int max_new = 8;
  rp_loss_agg a;
  assert_int_equal(rp_loss_agg_parse("token-sum", &a), RP_EINVAL);
  const char *names[3] = {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(rp_loss_agg_parse(names[i], &a), RP_OK);
    double tot = 0, w1 = rp_loss_agg_weight(a, 1, nseq, ntok, max_new);
    for (int q = 0; q < 5; q++) tot += clen[q] * rp_loss_agg_weight(a, clen[q], nseq, ntok, max_new);
    if (i < 2) assert_true(fabs(tot - 1.0) < 1e-12);   /* a weighted mean */
    if (i == 0) assert_true(fabs(w1 - 1.0 / 17) < 1e-15);
    if (i == 1) assert_true(fabs(w1 - 1.0 / 5) < 1e-15); /* a 1-token answer weighs a sequence */
    if (i == 2) assert_true(fabs(tot - 17.0 / (5 * 8)) < 1e-12); /* no length normalisation */
  }
}

static void test_on_policy_token(void **state) {
  (void)state;
  rp_rng r;
  rp_rng_seed(&r, 9);
  rp_pg_params p = {.clip_low = 0.2f, .clip_high = 0.28f, .beta = 0};
  for (int i = 0; i < 1000; i++) {
    float z[VP];
    for (int j = 0; j < V; j++) z[j] = 3 * rp_rng_normal(&r);
    float lp = rp_logprob_row(z, V, i % V, 1.0f);
    double adv = 4 * (rp_rng_uniform(&r) - 0.5);
    rp_pg_token o;
    rp_pg_token_loss(lp, lp, 0, adv, &p, &o);
    assert_true(o.ratio == 1.0 && !o.clipped && o.dlogp == -adv);
  }
}

/* ---- model-level checks on a tiny model */
static const rp_gpt_config tiny = {.L = 1, .C = 16, .NH = 2, .T = 12, .V = 40, .Vp = 64};

/* The head backward from given dlogits, fed cross-entropy's dlogits, gives
 * bitwise the gradients of the model's own head backward. */
static void test_head_from_dlogits_matches(void **state) {
  (void)state;
  rp_exec x = {.pool = NULL, .attn = rp_attn_reference()};
  rp_stage_spec spec = {0, tiny.L, 1, 1};
  rp_chunk m;
  assert_int_equal(rp_chunk_init(&m, &tiny, &spec), RP_OK);
  rp_chunk_init_weights(&m, 5);
  enum { B = 2, T = 6, N = B * T };
  rp_layer_acts lv[1];
  rp_acts a;
  void *mem = rp_alloc(rp_acts_bytes(&m, x.attn, B, T), RP_MEM_ACTS);
  rp_acts_bind(&a, lv, &m, x.attn, mem, B, T);
  rp_grad_ws w;
  assert_int_equal(rp_grad_ws_init(&w, &m, B, T), RP_OK);
  for (int i = 0; i < N; i++) {
    a.tokens[i] = (i * 7) % tiny.V;
    a.targets[i] = i % 3 ? (i * 5) % tiny.V : -1;
    a.pos[i] = i % T;
  }
  float *g1 = malloc(m.num_params * sizeof(float));
  rp_chunk_forward(&m, &a, NULL, &x);
  rp_chunk_zero_grads(&m);
  rp_chunk_backward(&m, &a, &w, 0.125f, &x);
  memcpy(g1, m.grads, m.num_params * sizeof(float));
  rp_chunk_forward(&m, &a, NULL, &x);
  rp_chunk_zero_grads(&m);
  rp_xent_backward(a.logits, NULL, a.logits, a.targets, 0.125f, N, tiny.V, tiny.Vp, NULL);
  rp_chunk_head_backward_from_dlogits(&m, &a, &w, NULL, &x);
  rp_chunk_layers_backward(&m, &a, &w, &x);
  rp_chunk_embed_backward(&m, &a, &w, &x);
  assert_memory_equal(g1, m.grads, m.num_params * sizeof(float));
  free(g1);
  rp_grad_ws_free(&w);
  rp_free(mem);
  rp_chunk_free(&m);
}

/* A hand-built job state around a tiny model and a 3-sequence rollout, with
 * micro = 2 so the pass spans two micro-batches. */
typedef struct {
  rp_rl_state s;
  rp_rl_opts o;
} mini_job;

/* The job's engine: the tiny model on one rank, a one-thread pool, the
 * reference attention, micro-batches of 2 sequences. */
static void mini_engine(rp_rl_state *s) {
  rp_train_opts to;
  assert_int_equal(rp_opts_defaults(rp_train_opt_table, rp_train_opt_count, &to), RP_OK);
  to.layers = tiny.L, to.channels = tiny.C, to.heads = tiny.NH, to.seq = tiny.T;
  to.vocab = tiny.V, to.batch = 2, to.microbatches = 1, to.seed = 21, to.threads = 1;
  to.measure_peak = 0;
  to.attention = RP_ATTN_NAIVE;
  assert_int_equal(rp_engine_init(&s->eng, &to), RP_OK);
  assert_int_equal(s->eng.cfg.Vp, tiny.Vp);
  s->model = &s->eng.chunks[0];
  s->grid = s->eng.grid;
  s->pool = s->eng.pool;
  s->exec = s->eng.exec;
  s->micro = 2;
}

static void mini_init(mini_job *j, int with_value) {
  memset(j, 0, sizeof *j);
  rp_rl_state *s = &j->s;
  s->o.temperature = 1.0f;
  s->o.vf_clip = 0.2f;
  s->o.vf_coef = 0.5f;
  s->cfg = tiny;
  mini_engine(s);
  assert_int_equal(rp_rollout_init(&s->ro, 3, tiny.T), RP_OK);
  s->has_vh = with_value;
  if (with_value) {
    assert_int_equal(rp_value_head_init(&s->vh, tiny.C), RP_OK);
    rp_rng r;
    rp_rng_seed(&r, 8);
    for (int c = 0; c <= tiny.C; c++) s->vh.p[c] = 0.3f * rp_rng_normal(&r);
    s->dvalue = rp_alloc((size_t)2 * tiny.T * sizeof(float), RP_MEM_WORKSPACE);
  }
  rp_rollout *ro = &s->ro;
  const int plen[3] = {3, 5, 2}, clen[3] = {4, 2, 6};
  ro->nseq = 3;
  for (int q = 0; q < 3; q++) {
    ro->plen[q] = plen[q];
    ro->clen[q] = clen[q];
    for (int t = 0; t < plen[q] + clen[q]; t++)
      ro->tokens[q * tiny.T + t] = (q * 11 + t * 7 + 3) % tiny.V;
    ro->seq_w[q] = 0.1f + 0.05f * q;
  }
  /* old/ref log-probs and values offset from the current ones, away from kinks */
  rp_rl_forward_seqs(s, s->model, ro, 0, 2, 0);
  rp_rl_gather_logp(s, ro, 0, 2, ro->old_logp);
  rp_rl_forward_seqs(s, s->model, ro, 2, 1, 0);
  rp_rl_gather_logp(s, ro, 2, 1, ro->old_logp);
  static const float off[6] = {0.0f, 0.5f, -0.1f, -0.5f, 0.35f, 0.1f};
  static const float voff[6] = {0.0f, 0.6f, -0.05f, -0.5f, 0.1f, 0.45f};
  int n = 0;
  for (int q = 0; q < 3; q++)
    for (int i = 0; i < clen[q]; i++, n++) {
      size_t k = (size_t)q * tiny.T + plen[q] - 1 + i;
      ro->ref_logp[k] = ro->old_logp[k] + 0.2f * ((n % 3) - 1);
      ro->old_logp[k] += off[n % 6];
      ro->adv[k] = (n % 2 ? 1.0f : -0.7f) * (1.0f + 0.1f * n);
      ro->value[k] = 0.2f * (n % 4) + voff[n % 6];
      ro->ret[k] = 1.0f - 0.1f * n;
    }
}

static void mini_free(mini_job *j) {
  rp_rl_state *s = &j->s;
  rp_rollout_free(&s->ro);
  if (s->has_vh) {
    rp_value_head_free(&s->vh);
    rp_free(s->dvalue);
  }
  rp_trainer_free(&s->eng);
}

static double pass_objective(mini_job *j, const rp_pg_params *pg, rp_pass_stats *ps) {
  rp_rl_state *s = &j->s;
  memset(ps, 0, sizeof *ps);
  rp_rl_zero_grads(s, rp_rl_microbatches(s, s->ro.nseq));
  rp_rl_policy_pass(s, 0, pg, ps);
  return ps->pg_loss + s->o.vf_coef * ps->v_loss;
}

/* Directional derivative per tensor (and of the value head) against the
 * gradient one pass accumulates. */
static void check_pass_gradient(mini_job *j, const rp_pg_params *pg) {
  rp_rl_state *s = &j->s;
  rp_pass_stats ps;
  pass_objective(j, pg, &ps);
  assert_true(ps.clipped > 0 && ps.clipped < ps.tokens);
  if (s->has_vh) assert_true(ps.v_clipped > 0 && ps.v_clipped < ps.tokens);
  size_t np = s->model->num_params;
  float *grads = malloc(np * sizeof(float)), vg[64];
  memcpy(grads, s->model->grads, np * sizeof(float));
  if (s->has_vh) memcpy(vg, s->vh.g, (size_t)(tiny.C + 1) * sizeof(float));
  rp_rng r;
  rp_rng_seed(&r, 77);
  int ntens = s->model->num_tensors + s->has_vh;
  for (int ti = 0; ti < ntens; ti++) {
    int is_vh = ti == s->model->num_tensors;
    const rp_tensor *t = is_vh ? NULL : &s->model->tensors[ti];
    size_t n = is_vh ? (size_t)tiny.C + 1 : t->is_wte ? (size_t)tiny.V * tiny.C : t->numel;
    float *p = is_vh ? s->vh.p : s->model->params + t->offset;
    const float *g = is_vh ? vg : grads + t->offset;
    float *dir = malloc(n * sizeof(float)), *saved = malloc(n * sizeof(float));
    double norm = 0, dot = 0;
    for (size_t i = 0; i < n; i++) {
      dir[i] = rp_rng_normal(&r);
      norm += (double)dir[i] * dir[i];
    }
    norm = sqrt(norm);
    for (size_t i = 0; i < n; i++) dot += g[i] * (dir[i] / norm);
    memcpy(saved, p, n * sizeof(float));
    /* the objective is exponential in logp: a small step keeps the third-order
     * term of the central difference below the tolerance */
    const double eps = 1e-3;
    for (size_t i = 0; i < n; i++) p[i] = (float)(saved[i] + eps * dir[i] / norm);
    double lp = pass_objective(j, pg, &ps);
    for (size_t i = 0; i < n; i++) p[i] = (float)(saved[i] - eps * dir[i] / norm);
    double lm = pass_objective(j, pg, &ps);
    memcpy(p, saved, n * sizeof(float));
    double fd = (lp - lm) / (2 * eps);
    if (fabs(fd - dot) > 1e-2 * fabs(dot) + 5e-4)
      fail_msg("%s: finite difference %.6g vs analytic %.6g", is_vh ? "value head" : t->name, fd,
               dot);
    free(dir);
    free(saved);
  }
  free(grads);
}

static void test_grpo_pass_gradient(void **state) {
  (void)state;
  mini_job j;
  mini_init(&j, 0);
  rp_pg_params pg = {.clip_low = 0.2f, .clip_high = 0.28f, .beta = 0.3f};
  check_pass_gradient(&j, &pg);
  mini_free(&j);
}

static void test_ppo_pass_gradient(void **state) {
  (void)state;
  mini_job j;
  mini_init(&j, 1);
  rp_pg_params pg = {.clip_low = 0.2f, .clip_high = 0.2f, .beta = 0};
  check_pass_gradient(&j, &pg);
  mini_free(&j);
}

/* The first pass records the old log-probs from its own forward: every ratio
 * is exactly 1 and nothing is clipped. */
static void test_first_pass_on_policy(void **state) {
  (void)state;
  mini_job j;
  mini_init(&j, 0);
  rp_pg_params pg = {.clip_low = 0.2f, .clip_high = 0.2f, .beta = 0};
  rp_pass_stats ps = {0};
  rp_rl_zero_grads(&j.s, rp_rl_microbatches(&j.s, j.s.ro.nseq));
  rp_rl_policy_pass(&j.s, 1, &pg, &ps);
  assert_true(ps.tokens == 12);
  assert_true(ps.ratio == ps.tokens); /* sum of ratios, each exactly 1 */
  assert_true(ps.clipped == 0 && ps.kl_old == 0.0);
  mini_free(&j);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pg_formula),          cmocka_unit_test(test_grpo_dlogits_fd),
      cmocka_unit_test(test_ppo_dlogits_fd),      cmocka_unit_test(test_value_loss),
      cmocka_unit_test(test_gae_by_hand),         cmocka_unit_test(test_k3),
      cmocka_unit_test(test_group_advantages),    cmocka_unit_test(test_loss_aggregation),
      cmocka_unit_test(test_on_policy_token),     cmocka_unit_test(test_head_from_dlogits_matches),
      cmocka_unit_test(test_grpo_pass_gradient),  cmocka_unit_test(test_ppo_pass_gradient),
      cmocka_unit_test(test_first_pass_on_policy),
  };
  if (rp_mpi_init(&argc, &argv) != RP_OK) return 1;
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  rp_mpi_finalize();
  return rc;
}
