/* The definitions kern_util.h's vector-typed lane loops must equal bit for
 * bit: lane j takes elements j, j + 16, ... in order, the lanes are reduced
 * 0..15, the tail goes on after them (y NULL: a sum, else a dot product).
 * Shared by test_kern_util.c and lanes_march.c. */
#ifndef RP_TEST_LANES_REF_H
#define RP_TEST_LANES_REF_H

static float lanes_sum(const float *x, const float *y, long n) {
  float acc[16] = {0};
  long i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; j++) acc[j] += y ? x[i + j] * y[i + j] : x[i + j];
  float s = 0.0f;
  for (int j = 0; j < 16; j++) s += acc[j];
  for (; i < n; i++) s += y ? x[i] * y[i] : x[i];
  return s;
}

static float lanes_max(const float *x, long n) {
  float acc[16];
  for (int j = 0; j < 16; j++) acc[j] = x[0];
  long i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; j++) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
  float m = acc[0];
  for (int j = 1; j < 16; j++) m = acc[j] > m ? acc[j] : m;
  for (; i < n; i++) m = x[i] > m ? x[i] : m;
  return m;
}

#endif
