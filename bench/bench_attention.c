/* `ringpipe bench attention` as a standalone program; the body is in src/cli/cmd_bench_attention.c. */
#include "ringpipe/rp_flash.h"
int main(int argc, char **argv) { return rp_bench_attention(argc, argv); }
