/* Tasks with verifiable rewards: problems generated from a seed, byte tokens,
 * answers checked by plain C.
 *
 *   add        "123+456="          -> "579\n"
 *   reverse    "rev:abcde="        -> "edcba\n"
 *   sort       "sort:31415="       -> "11345\n"
 *   countdown  "cd:75:3,7,25,50="  -> "50+25\n"  (countdown.c)
 *
 * The split is a property of the problem, not of the seed: a prompt is held
 * out when a hash of its text falls in one of RP_TASK_HELDOUT_MOD buckets, so
 * SFT and RL runs with any seeds agree on which problems they may train on.
 * Example i of a split is the first draw, from a stream seeded by (seed, split,
 * i), that lands in that split. */
#include <stdio.h>
#include <string.h>

#include "ringpipe/rp_rl.h"
#include "rl_internal.h"

static const char *const names[] = {"add", "reverse", "sort", "countdown"};
static const int size_lo[] = {1, 2, 2, 2}, size_hi[] = {9, 24, 24, 6};

const char *rp_task_name(rp_task_kind k) { return names[k]; }

rp_status rp_task_init_kind(rp_task *t, rp_task_kind kind, int size) {
  if ((int)kind < 0 || (int)kind >= 4)
    return rp_err(RP_EINVAL, "task %d is unknown; use add, reverse, sort or countdown", (int)kind);
  if (size < size_lo[kind] || size > size_hi[kind])
    return rp_err(RP_EINVAL, "--task-size %d is out of range for task %s; use %d..%d", size,
                  names[kind], size_lo[kind], size_hi[kind]);
  *t = (rp_task){.kind = kind, .size = size, .format_bonus = 0.1f};
  return RP_OK;
}

rp_status rp_task_init(rp_task *t, const char *name, int size) {
  for (int i = 0; i < 4; i++)
    if (strcmp(name, names[i]) == 0) return rp_task_init_kind(t, (rp_task_kind)i, size);
  return rp_err(RP_EINVAL, "unknown task '%s'; use add, reverse, sort or countdown", name);
}

int rp_task_max_prompt(const rp_task *t) {
  int n = t->size;
  switch (t->kind) {
    case RP_TASK_ADD: return 2 * n + 2;
    case RP_TASK_REVERSE: return n + 5;
    case RP_TASK_SORT: return n + 6;
    case RP_TASK_COUNTDOWN: return rp_countdown_max_prompt(n);
  }
  return 0;
}

int rp_task_max_answer(const rp_task *t) {
  int n = t->size;
  switch (t->kind) {
    case RP_TASK_ADD: return n + 2;
    case RP_TASK_REVERSE:
    case RP_TASK_SORT: return n + 1;
    case RP_TASK_COUNTDOWN: return rp_countdown_max_answer(n);
  }
  return 0;
}

uint64_t rp_rl_mix(uint64_t x) {
  /* splitmix64's finaliser: a cheap bijection with good avalanche */
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

rp_task_split rp_task_split_of(const char *prompt) {
  uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)prompt; *p; p++)
    h = (h ^ *p) * 0x100000001b3ULL;
  return rp_rl_mix(h) % RP_TASK_HELDOUT_MOD == 0 ? RP_SPLIT_HELDOUT : RP_SPLIT_TRAIN;
}

static uint64_t pow10u(int d) {
  uint64_t p = 1;
  while (d-- > 0) p *= 10;
  return p;
}

static void draw(const rp_task *t, rp_rng *r, rp_task_example *ex) {
  char buf[32]; /* sizes are at most 24 */
  int n = t->size;
  switch (t->kind) {
    case RP_TASK_ADD: {
      uint64_t lim = pow10u(n);
      unsigned long long a = rp_rng_u64(r) % lim, b = rp_rng_u64(r) % lim;
      snprintf(ex->prompt, sizeof ex->prompt, "%llu+%llu=", a, b);
      snprintf(ex->answer, sizeof ex->answer, "%llu\n", a + b);
      break;
    }
    case RP_TASK_REVERSE:
      for (int i = 0; i < n; i++) buf[i] = (char)('a' + rp_rng_below(r, 26));
      buf[n] = '\0';
      snprintf(ex->prompt, sizeof ex->prompt, "rev:%s=", buf);
      for (int i = 0; i < n; i++) ex->answer[i] = buf[n - 1 - i];
      ex->answer[n] = RP_TASK_STOP;
      ex->answer[n + 1] = '\0';
      break;
    case RP_TASK_SORT: {
      int count[10] = {0};
      for (int i = 0; i < n; i++) {
        int d = (int)rp_rng_below(r, 10);
        buf[i] = (char)('0' + d);
        count[d]++;
      }
      buf[n] = '\0';
      snprintf(ex->prompt, sizeof ex->prompt, "sort:%s=", buf);
      int k = 0;
      for (int d = 0; d < 10; d++)
        while (count[d]-- > 0) ex->answer[k++] = (char)('0' + d);
      ex->answer[k++] = RP_TASK_STOP;
      ex->answer[k] = '\0';
      break;
    }
    case RP_TASK_COUNTDOWN:
      rp_countdown_draw(n, r, ex);
      break;
  }
}

void rp_task_example_get(const rp_task *t, uint64_t seed, rp_task_split split, uint64_t index,
                         rp_task_example *ex) {
  rp_rng r;
  rp_rng_seed(&r, rp_rl_mix(seed ^ rp_rl_mix(index * 2 + (uint64_t)split)));
  /* Expected draws: 8/7 for train, 8 for held-out; every task's problem space
   * is large enough that both splits are far from empty. */
  for (long tries = 0; tries < (1L << 24); tries++) {
    draw(t, &r, ex);
    if (rp_task_split_of(ex->prompt) == split) return;
  }
  rp_fatal("task %s size %d: no %s problem found; the problem space is too small",
           names[t->kind], t->size, split == RP_SPLIT_TRAIN ? "train" : "held-out");
}

/* ---- rewards. Each checker gets the completion without its stop byte and
 * says whether it is well formed (right shape) and whether it is correct. */

static int all_in(const char *s, int n, char lo, char hi) {
  for (int i = 0; i < n; i++)
    if (s[i] < lo || s[i] > hi) return 0;
  return 1;
}

/* Parses "<digits>+<digits>=" into a and b. */
static int parse_add(const char *p, unsigned long long *a, unsigned long long *b) {
  char tail;
  return sscanf(p, "%llu+%llu%c", a, b, &tail) == 3 && tail == '=';
}

/* Body of a "name:<body>=" prompt into buf (NUL terminated); 0 if malformed. */
static int prompt_body(const char *p, const char *tag, char *buf, size_t cap) {
  size_t tl = strlen(tag), n = strlen(p);
  if (n < tl + 1 || strncmp(p, tag, tl) != 0 || p[n - 1] != '=' || n - tl - 1 >= cap) return 0;
  memcpy(buf, p + tl, n - tl - 1);
  buf[n - tl - 1] = '\0';
  return 1;
}

static void check_add(const char *prompt, const char *c, int n, int *form, int *ok) {
  unsigned long long a, b;
  *form = n >= 1 && n <= 20 && all_in(c, n, '0', '9');
  *ok = 0;
  if (!*form || !parse_add(prompt, &a, &b)) return;
  char want[32];
  int wn = snprintf(want, sizeof want, "%llu", a + b);
  *ok = wn == n && memcmp(want, c, (size_t)n) == 0;
}

static void check_reverse(const char *prompt, const char *c, int n, int *form, int *ok) {
  char body[RP_TASK_MAXLEN];
  *form = *ok = 0;
  if (!prompt_body(prompt, "rev:", body, sizeof body)) return;
  int bn = (int)strlen(body);
  *form = n == bn && all_in(c, n, 'a', 'z');
  if (!*form) return;
  *ok = 1;
  for (int i = 0; i < n; i++) *ok &= c[i] == body[n - 1 - i];
}

static void check_sort(const char *prompt, const char *c, int n, int *form, int *ok) {
  char body[RP_TASK_MAXLEN];
  *form = *ok = 0;
  if (!prompt_body(prompt, "sort:", body, sizeof body)) return;
  int bn = (int)strlen(body);
  *form = n == bn && all_in(c, n, '0', '9');
  if (!*form) return;
  int count[10] = {0};
  for (int i = 0; i < n; i++) {
    if (body[i] < '0' || body[i] > '9') return;
    count[body[i] - '0']++;
    count[c[i] - '0']--;
  }
  *ok = 1;
  for (int d = 0; d < 10; d++) *ok &= count[d] == 0;
  for (int i = 1; i < n; i++) *ok &= c[i - 1] <= c[i];
}

float rp_task_reward(const rp_task *t, const char *prompt, const char *completion, int len) {
  /* Well formed needs the stop byte exactly once, at the end: a completion
   * cut off by the token budget is neither right nor well formed. */
  if (len < 1 || completion[len - 1] != RP_TASK_STOP) return 0.0f;
  if (memchr(completion, RP_TASK_STOP, (size_t)(len - 1))) return 0.0f;
  int n = len - 1, form = 0, ok = 0;
  switch (t->kind) {
    case RP_TASK_ADD: check_add(prompt, completion, n, &form, &ok); break;
    case RP_TASK_REVERSE: check_reverse(prompt, completion, n, &form, &ok); break;
    case RP_TASK_SORT: check_sort(prompt, completion, n, &form, &ok); break;
    case RP_TASK_COUNTDOWN: rp_countdown_check(prompt, completion, n, &form, &ok); break;
  }
  return ok ? 1.0f : form ? t->format_bonus : 0.0f;
}
