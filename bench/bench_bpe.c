/* GPT-2 BPE encoding throughput: bench_bpe TOKENIZER TEXT [REPEATS]
 * Encodes TEXT (its bytes repeated REPEATS times, default 8) with llm.c's
 * gpt2_tokenizer.bin, best of 3 runs, and prints MB/s and tokens/s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/rp_data.h"
#include "ringpipe/rp_util.h"

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: bench_bpe gpt2_tokenizer.bin TEXT [REPEATS]\n");
    return 2;
  }
  int reps = argc > 3 ? atoi(argv[3]) : 8;
  rp_tokenizer *tk;
  if (rp_tokenizer_load_gpt2(&tk, argv[1]) != RP_OK || !rp_tokenizer_can_encode(tk)) {
    fprintf(stderr, "bench_bpe: %s\n", rp_errmsg());
    return 2;
  }
  FILE *f = fopen(argv[2], "rb");
  if (!f) {
    perror(argv[2]);
    return 2;
  }
  fseek(f, 0, SEEK_END);
  size_t one = (size_t)ftell(f), n = one * (size_t)(reps > 0 ? reps : 1);
  rewind(f);
  char *text = malloc(n);
  if (!text || fread(text, 1, one, f) != one) return 2;
  fclose(f);
  for (size_t at = one; at < n; at += one) memcpy(text + at, text, one);
  int32_t *ids = malloc(n * sizeof *ids);
  size_t k = 0;
  double best = 1e30;
  for (int r = 0; r < 3; r++) {
    double t0 = rp_now();
    if (rp_tokenizer_encode(tk, text, n, ids, n, &k) != RP_OK) {
      fprintf(stderr, "bench_bpe: %s\n", rp_errmsg());
      return 2;
    }
    double dt = rp_now() - t0;
    if (dt < best) best = dt;
  }
  printf("GPT-2 BPE encode: %zu bytes -> %zu tokens (%.3f bytes/token) in %.3f s: %.2f MB/s, "
         "%.0f tokens/s (one thread, best of 3)\n", n, k, (double)n / (double)k, best,
         (double)n / best / 1e6, (double)k / best);
  free(ids);
  free(text);
  rp_tokenizer_free(tk);
  return 0;
}
