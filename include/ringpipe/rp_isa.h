/* Instruction-set levels: what this CPU runs, and the ceiling every hand-written
 * SIMD path obeys (flash attention, the bf16 GEMM and conversions, the FMA peak
 * probes).
 *
 * Levels are ordered; each includes the ones below:
 *   scalar      no hand-written SIMD (plain C; the compiler may still vectorize
 *               it for the build's -march)
 *   avx2        AVX2 + FMA                               (Haswell, AMD Zen 1-3)
 *   avx512      AVX-512 F, BW, VL and DQ                 (Skylake-X, Zen 4)
 *   avx512bf16  avx512 + AVX512-BF16 (vdpbf16ps)         (Cooper Lake, Sapphire
 *               Rapids, Zen 4/5)
 *   amx         avx512bf16 + AMX-TILE and AMX-BF16 (tdpbf16ps on 16 x 32 bf16
 *               tiles)                                   (Sapphire Rapids and later)
 *
 * amx also needs the OS: XCR0 must enable the tile state, and Linux hands the
 * 8 KiB of tile data to a process only after it asks (arch_prctl
 * ARCH_REQ_XCOMP_PERM, done once here at detection, for the whole process).
 * Where any of that fails the CPU's level stays avx512bf16 and rp_isa_why_not
 * (RP_ISA_AMX) says which part failed. A build whose compiler cannot emit AMX
 * (no -mamx-tile) has no amx level either.
 *
 * The ceiling is the CPU's level unless RINGPIPE_ISA (or the CLI's --isa) names
 * a lower one; dispatchers use the best path at or below it. A request above
 * what the CPU runs is an error, not a clamp: the override exists to test a
 * path, and a clamp would let "RINGPIPE_ISA=avx512 meson test" pass on an AVX2
 * machine while testing nothing it asked for. An unknown name is an error too.
 *
 * The ceiling is process-wide; set it before launching work, not during. A
 * kernel chosen by a run's config (rp_flash_config.isa) yields to a lower one. */
#ifndef RP_ISA_H
#define RP_ISA_H

#include <stddef.h>

#include "rp_base.h"

typedef enum {
  RP_ISA_SCALAR = 0,
  RP_ISA_AVX2 = 1,
  RP_ISA_AVX512 = 2,
  RP_ISA_AVX512BF16 = 3,
  RP_ISA_AMX = 4,
} rp_isa;
#define RP_ISA_LEVELS 5

/* The environment variable that sets the ceiling. */
#define RP_ISA_ENV "RINGPIPE_ISA"

const char *rp_isa_name(rp_isa level);          /* "scalar", "avx2", ... */
/* Parses a level name; RP_EINVAL naming the value, `source` (e.g. "RINGPIPE_ISA"
 * or "--isa") and the valid names for anything else. */
rp_status rp_isa_parse(const char *name, const char *source, rp_isa *level);

/* The best level this CPU (and this build: x86-64 with GCC or clang) runs. */
rp_isa rp_isa_cpu(void);
/* The check every request passes: RP_EINVAL, naming source=level and what a CPU
 * of level `cpu` runs, when level > cpu (tests see an AVX2 machine's message). */
rp_status rp_isa_check_cpu(rp_isa level, rp_isa cpu, const char *source);

/* Applies RINGPIPE_ISA once (later calls return the same status): RP_EINVAL with
 * a message when it is unknown or above rp_isa_cpu(). Unset or empty: the
 * ceiling is the CPU's level. */
rp_status rp_isa_init(void);

/* Sets the ceiling by name (the CLI's --isa; source names it in messages), with
 * the same checks as RINGPIPE_ISA. Overrides the environment. */
rp_status rp_isa_request(const char *name, const char *source);
/* Sets the ceiling to a level (tests loop over levels with it); RP_EINVAL if
 * the CPU cannot run it. */
rp_status rp_isa_set(rp_isa level);

/* The ceiling in force. Calls rp_isa_init first; if RINGPIPE_ISA is invalid and
 * nobody checked it (the CLI does, at start-up), this dies through rp_fatal
 * with its message rather than silently running some other path. */
rp_isa rp_isa_active(void);
/* level <= rp_isa_active(): a dispatcher may run code of this level. */
int rp_isa_allows(rp_isa level);
/* Where the ceiling came from: "cpu", "RINGPIPE_ISA", or the request's source. */
const char *rp_isa_source(void);
/* Why level cannot run now (the CPU lacks it, or the ceiling is below it), for
 * "n/a" and "skipped" lines; "" when it can. */
const char *rp_isa_why_not(rp_isa level);

/* What the compiler may use in plain C code, whatever the ceiling: the build's
 * -march ("avx512", "avx2", "x86-64 baseline (SSE2)"). -Dnative=false builds
 * for the baseline. */
const char *rp_isa_build_target(void);

/* 1 on an AMD CPU (the CPUID vendor), else 0: an input of the default GEMM
 * mode's rule (rp_gemm_auto_rule), whose choice between OpenBLAS and the own
 * GEMM was measured on each vendor's cores. */
int rp_isa_cpu_is_amd(void);

/* One core's L2 cache in bytes: sysconf, else /sys (cpu0), else 1 MiB; read
 * once. The kernels size their blocks from it (the fp32 GEMM's k blocks, flash
 * attention's tiles unless its config names a size). */
long rp_isa_l2_bytes(void);
/* One core's L1 data cache in bytes, the same way (else 48 KiB). */
long rp_isa_l1d_bytes(void);

/* ---- implemented in src/kernels (isa_kernels.c): they know the kernels */

/* One thread's peak multiply-add rate in GFLOP/s (2 flops per multiply-add) at a
 * SIMD level, from a register-only loop measured once: avx2 = ymm FMA, avx512 =
 * zmm FMA, avx512bf16 = vdpbf16ps, amx = tdpbf16ps (4 tile accumulators). 0
 * (not measured) for scalar and for a level
 * the CPU or the ceiling excludes (rp_isa_why_not says which). */
double rp_isa_peak_gflops(rp_isa level);
/* One run of that level's register-only loop on the calling thread, GFLOP/s
 * (well under a millisecond; 0 where rp_isa_peak_gflops would give 0). */
double rp_isa_probe_once(rp_isa level);

/* The probe held up to a whole run's conditions (fma_sustained.c): the loop of
 * `level` on every thread of `pool` at once, run after run for `seconds`
 * (wall clock), each run timed in its thread's CPU time as the start-up probe
 * is. Per thread (per_thread[ith], pool size entries) the number of runs and
 * their best, 90th, 50th and 10th percentile rates. rp_isa_peak_gflops is one
 * thread's best over 40 ms with the others idle, multiplied by the threads:
 * if the threads together run slower (hyperthreads sharing a core's FMA
 * units, a power limit), every fraction of that peak reads low, and this
 * says so. RP_EINVAL for a level without a probe under the ceiling. */
typedef struct rp_pool rp_pool;
#define RP_ISA_PROBE_MAX_RUNS (1L << 18) /* runs a thread at most: it stops there */
typedef struct {
  int runs;
  double best, p90, median, p10;
} rp_isa_probe_stats;
rp_status rp_isa_probe_sustained(rp_isa level, rp_pool *pool, double seconds,
                                 rp_isa_probe_stats *per_thread);
/* The sum of those per-thread medians in GFLOP/s (what the threads reach
 * together), or 0 where the probe cannot run. */
double rp_isa_probe_together(rp_isa level, rp_pool *pool, double seconds);
/* rates[0..n) sorted in place and summarised (nearest-rank percentiles; all 0
 * for n = 0). */
void rp_isa_probe_summarize(double *rates, int n, rp_isa_probe_stats *st);

/* The level whose probe is the fp32 FMA ceiling (the GEMM's and the step
 * profile's): avx512 (zmm) where the ceiling allows it, else avx2 (ymm), else
 * scalar (no probe: rp_isa_peak_gflops gives 0). */
rp_isa rp_isa_fp32_fma_level(void);

/* One line naming the path each kernel family takes under the ceiling in force
 * (flash attention, bf16 GEMM and conversions, the rest), for start-up output. */
void rp_isa_kernel_summary(char *buf, size_t n);

#endif
