/* The 16-lane partial sums of kern_util.h (rp_kern_sum, rp_kern_dot,
 * rp_kern_max), built alone for one -march by isa_baselines.sh: they hold
 * their lanes in RP_V16_PARTS vectors of the target's width (one zmm, two ymm,
 * four xmm), so each -march runs different code. Each result must equal the
 * lane definition bit for bit (lane j takes elements j, j + 16, ... in order,
 * the lanes are reduced 0..15, the tail goes on after them), and the program
 * prints a checksum of every result's bits, which the script compares across
 * the -march builds the CPU can run: the same bits on every target.
 * No library, no cmocka: it must build with nothing but the compiler.
 * usage: lanes_march      prints "lanes_march: parts P checksum C", exit 1 on a mismatch */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kern_util.h"
#include "lanes_ref.h"

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return isnan(f) ? 0x7FC00000u : u; /* a NaN's payload depends on operand order */
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_next(void) { /* xorshift64*: the same inputs on every target */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1Dull;
}
static float rng_unit(void) { return (float)(rng_next() >> 40) / (float)(1 << 24); }

int main(void) {
  enum { MAXN = 300, TRIALS = 3000 };
  static const float special[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-45f, -1e-40f};
  static const float zeros_kind[4] = {0.0f, -0.0f, -1.0f, -INFINITY};
  float x[MAXN], y[MAXN];
  uint32_t check = 2166136261u; /* FNV-1a over the results' bits */
  int bad = 0;
  for (int t = 0; t < TRIALS; t++) {
    const long n = 1 + (long)(rng_next() % MAXN);
    const int kind = t % 3; /* ordinary; NaN, Inf, zeros, denormals mixed in; signed zeros */
    for (long i = 0; i < n; i++) {
      x[i] = rng_unit() * 200.0f - 100.0f;
      y[i] = rng_unit() * 2.0f - 1.0f;
      if (kind == 1 && rng_next() % 8 == 0) x[i] = special[rng_next() % 8];
      if (kind == 2) x[i] = zeros_kind[rng_next() % 4];
    }
    const float got[3] = {rp_kern_sum(x, n), rp_kern_dot(x, y, n), rp_kern_max(x, n)};
    const float want[3] = {lanes_sum(x, NULL, n), lanes_sum(x, y, n), lanes_max(x, n)};
    for (int k = 0; k < 3; k++) {
      bad += bits_of(got[k]) != bits_of(want[k]);
      const uint32_t b = bits_of(got[k]);
      for (int s = 0; s < 32; s += 8) check = (check ^ ((b >> s) & 0xFFu)) * 16777619u;
    }
  }
  printf("lanes_march: parts %d checksum %08x\n", RP_V16_PARTS, (unsigned)check);
  if (bad) fprintf(stderr, "lanes_march: %d of %d results off the lane definition\n", bad, 3 * TRIALS);
  return bad ? 1 : 0;
}
