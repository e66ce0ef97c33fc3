/* Countdown: reach a target with some of the given numbers (each at most once)
 * and + - * / with parentheses. Prompt "cd:75:3,7,25,50=", answer an
 * expression such as "50+25\n".
 *
 * Problems are built forwards so that a solution exists: a random subset of
 * the numbers, in random order, is combined left to right with random
 * operations whose intermediate results stay positive integers (division only
 * when exact) and at most 999; that value is the target and the expression the
 * reference answer. The checker evaluates in exact integers: a division that
 * leaves a remainder makes the answer wrong (but still well formed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_rl.h"
#include "rl_internal.h"

#define CD_MAX_NUM 25      /* numbers are drawn from 1..CD_MAX_NUM */
#define CD_MAX_TARGET 999
#define CD_MAX_N 6

/* "cd:" target(3) ':' n numbers of <= 2 digits, n-1 commas, '=' */
int rp_countdown_max_prompt(int n) { return 7 + 3 * n; }
/* n numbers, n-1 operators, a pair of parentheses per operator, the stop byte */
int rp_countdown_max_answer(int n) { return 2 * n + 3 * (n - 1) + 1; }

void rp_countdown_draw(int n, rp_rng *r, rp_task_example *ex) {
  int nums[CD_MAX_N];
  for (int i = 0; i < n; i++) nums[i] = 1 + (int)rp_rng_below(r, CD_MAX_NUM);
  int order[CD_MAX_N];
  for (int i = 0; i < n; i++) order[i] = i;
  for (int i = n - 1; i > 0; i--) { /* Fisher-Yates */
    int j = (int)rp_rng_below(r, (uint32_t)i + 1), tmp = order[i];
    order[i] = order[j];
    order[j] = tmp;
  }
  int k = 2 + (int)rp_rng_below(r, (uint32_t)n - 1); /* numbers used: 2..n */
  /* at most rp_countdown_max_answer(CD_MAX_N) = 28 bytes; tmp has room for one more step */
  char expr[40], tmp[64];
  long acc = nums[order[0]];
  int additive = 0; /* top level of expr is a + or - chain: needs parentheses before * or / */
  snprintf(expr, sizeof expr, "%ld", acc);
  for (int i = 1; i < k; i++) {
    long x = nums[order[i]];
    char ops[4];
    int nops = 0;
    if (acc + x <= CD_MAX_TARGET) ops[nops++] = '+';
    if (acc > x) ops[nops++] = '-';
    if (acc * x <= CD_MAX_TARGET) ops[nops++] = '*';
    if (x > 1 && acc % x == 0) ops[nops++] = '/';
    if (nops == 0) break; /* cannot happen with these bounds, but stay safe */
    char op = ops[rp_rng_below(r, (uint32_t)nops)];
    int paren = additive && (op == '*' || op == '/');
    snprintf(tmp, sizeof tmp, paren ? "(%s)%c%ld" : "%s%c%ld", expr, op, x);
    size_t tl = strlen(tmp);
    RP_CHECK(tl < sizeof expr);
    memcpy(expr, tmp, tl + 1);
    additive = op == '+' || op == '-' ? 1 : paren ? 0 : additive;
    acc = op == '+' ? acc + x : op == '-' ? acc - x : op == '*' ? acc * x : acc / x;
  }
  int len = snprintf(ex->prompt, sizeof ex->prompt, "cd:%ld:", acc);
  for (int i = 0; i < n; i++)
    len += snprintf(ex->prompt + len, sizeof ex->prompt - (size_t)len, i ? ",%d" : "%d",
                    nums[i]);
  snprintf(ex->prompt + len, sizeof ex->prompt - (size_t)len, "=");
  snprintf(ex->answer, sizeof ex->answer, "%s\n", expr);
}

/* ---- checker: recursive descent over
 *   expr := term (('+'|'-') term)*,  term := factor (('*'|'/') factor)*,
 *   factor := number | '(' expr ')' */
typedef struct {
  const char *s;
  int n, pos;
  int syntax_error, value_error;  /* malformed / inexact division or overflow */
  int used[16], nused;
} cd_parser;

static long cd_expr(cd_parser *p, int depth);

static long cd_factor(cd_parser *p, int depth) {
  if (p->pos < p->n && p->s[p->pos] == '(') {
    p->pos++;
    long v = cd_expr(p, depth + 1);
    if (p->pos < p->n && p->s[p->pos] == ')')
      p->pos++;
    else
      p->syntax_error = 1;
    return v;
  }
  int start = p->pos;
  long v = 0;
  while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9' && p->pos - start < 6)
    v = v * 10 + (p->s[p->pos++] - '0');
  if (p->pos == start || (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')) {
    p->syntax_error = 1;
    return 0;
  }
  if (p->nused < 16)
    p->used[p->nused++] = (int)v;
  else
    p->value_error = 1;
  return v;
}

static long clamp_overflow(cd_parser *p, long v) {
  if (v > 1000000000L || v < -1000000000L) {
    p->value_error = 1;
    return 0;
  }
  return v;
}

static long cd_term(cd_parser *p, int depth) {
  long v = cd_factor(p, depth);
  while (!p->syntax_error && p->pos < p->n && (p->s[p->pos] == '*' || p->s[p->pos] == '/')) {
    char op = p->s[p->pos++];
    long w = cd_factor(p, depth);
    if (op == '*') {
      v = clamp_overflow(p, v * w);
    } else if (w == 0 || v % w != 0) {
      p->value_error = 1;
      v = 0;
    } else {
      v /= w;
    }
  }
  return v;
}

static long cd_expr(cd_parser *p, int depth) {
  if (depth > 16) {
    p->syntax_error = 1;
    return 0;
  }
  long v = cd_term(p, depth);
  while (!p->syntax_error && p->pos < p->n && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) {
    char op = p->s[p->pos++];
    long w = cd_term(p, depth);
    v = clamp_overflow(p, op == '+' ? v + w : v - w);
  }
  return v;
}

/* "cd:<target>:<n1>,<n2>,...=" */
static int parse_prompt(const char *prompt, long *target, int *nums, int *n) {
  char *end;
  if (strncmp(prompt, "cd:", 3) != 0) return 0;
  *target = strtol(prompt + 3, &end, 10);
  if (end == prompt + 3 || *end != ':') return 0;
  *n = 0;
  const char *p = end + 1;
  for (;;) {
    long v = strtol(p, &end, 10);
    if (end == p || *n >= CD_MAX_N * 2) return 0;
    nums[(*n)++] = (int)v;
    if (*end == '=') return end[1] == '\0';
    if (*end != ',') return 0;
    p = end + 1;
  }
}

void rp_countdown_check(const char *prompt, const char *c, int n, int *form, int *ok) {
  cd_parser p = {.s = c, .n = n};
  long v = n > 0 ? cd_expr(&p, 0) : 0;
  *form = n > 0 && !p.syntax_error && p.pos == n;
  *ok = 0;
  long target;
  int nums[CD_MAX_N * 2], nn;
  if (!*form || p.value_error || !parse_prompt(prompt, &target, nums, &nn)) return;
  if (v != target) return;
  /* each given number at most once */
  int taken[CD_MAX_N * 2] = {0};
  for (int i = 0; i < p.nused; i++) {
    int found = 0;
    for (int j = 0; j < nn && !found; j++)
      if (!taken[j] && nums[j] == p.used[i]) taken[j] = found = 1;
    if (!found) return;
  }
  *ok = 1;
}
