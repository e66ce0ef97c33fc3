/* Instruction-set detection and the ceiling (see rp_isa.h): the one place that
 * asks the CPU what it runs, so that every dispatcher agrees and RINGPIPE_ISA
 * can force any path the machine has. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "ringpipe/rp_isa.h"

static const char *const level_names[RP_ISA_LEVELS] = {"scalar", "avx2", "avx512",
                                                        "avx512bf16", "amx"};
#define VALID_NAMES "scalar|avx2|avx512|avx512bf16|amx"

const char *rp_isa_name(rp_isa level) {
  return level >= RP_ISA_SCALAR && level < RP_ISA_LEVELS ? level_names[level] : "?";
}

rp_status rp_isa_parse(const char *name, const char *source, rp_isa *level) {
  for (int i = 0; i < RP_ISA_LEVELS; i++)
    if (name && strcmp(name, level_names[i]) == 0) {
      *level = (rp_isa)i;
      return RP_OK;
    }
  return rp_err(RP_EINVAL, "%s '%s' is not an instruction set; use one of " VALID_NAMES,
                source, name ? name : "(null)");
}

/* ---- what the CPU runs. __builtin_cpu_supports also checks that the OS saves
 * the ymm/zmm state (XGETBV), so a level reported here is safe to execute. */

/* Why AMX cannot run (set once by detect; "" when it can). */
static char g_amx_why[128] = "not detected yet";

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && defined(RP_BUILD_AMX)
#define AMX_XCR0_TILE (3ull << 17) /* XTILECFG and XTILEDATA state components */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static unsigned long long xgetbv0(void) {
  unsigned int lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (unsigned long long)hi << 32 | lo;
}

/* CPUID (7.0: EDX bit 22 AMX-BF16, bit 24 AMX-TILE), the OS's XCR0 (tile state
 * enabled) and Linux's permission for tile data, requested for the process:
 * without it the first tile instruction dies with SIGILL. */
static int amx_usable(void) {
  unsigned int a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) {
    snprintf(g_amx_why, sizeof g_amx_why, "the OS does not enable XSAVE (no XGETBV)");
    return 0;
  }
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 22))) {
    snprintf(g_amx_why, sizeof g_amx_why, "the CPU lacks AMX-TILE/AMX-BF16");
    return 0;
  }
  if ((xgetbv0() & AMX_XCR0_TILE) != AMX_XCR0_TILE) {
    snprintf(g_amx_why, sizeof g_amx_why, "the OS does not enable the AMX tile state (XCR0)");
    return 0;
  }
#if defined(__linux__)
  if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
    snprintf(g_amx_why, sizeof g_amx_why,
             "Linux refused AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM: %s)", strerror(errno));
    return 0;
  }
#endif
  g_amx_why[0] = '\0';
  return 1;
}
#else
static int amx_usable(void) {
  snprintf(g_amx_why, sizeof g_amx_why,
           "this build has no AMX kernels (its compiler lacks -mamx-tile/-mamx-bf16)");
  return 0;
}
#endif

static rp_isa detect(void) {
  int amx = amx_usable(); /* sets g_amx_why either way */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return RP_ISA_SCALAR;
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq"))
    return RP_ISA_AVX2;
  if (!__builtin_cpu_supports("avx512bf16")) return RP_ISA_AVX512;
  return amx ? RP_ISA_AMX : RP_ISA_AVX512BF16;
#else
  (void)amx;
  return RP_ISA_SCALAR;
#endif
}

static int detect_amd(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  return __builtin_cpu_is("amd") ? 1 : 0;
#else
  return 0;
#endif
}

static pthread_once_t g_detect_once = PTHREAD_ONCE_INIT;
static rp_isa g_cpu = RP_ISA_SCALAR;
static int g_amd = 0;
static void detect_once(void) {
  g_cpu = detect();
  g_amd = detect_amd();
}

rp_isa rp_isa_cpu(void) {
  pthread_once(&g_detect_once, detect_once);
  return g_cpu;
}

int rp_isa_cpu_is_amd(void) {
  pthread_once(&g_detect_once, detect_once);
  return g_amd;
}

/* ---- the ceiling */

static rp_isa g_ceiling = RP_ISA_SCALAR;
static char g_source[32] = "cpu";
static rp_status g_env_status = RP_OK;
static char g_env_msg[256];
static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;

rp_status rp_isa_check_cpu(rp_isa level, rp_isa cpu, const char *source) {
  if (level <= cpu) return RP_OK;
  return rp_err(RP_EINVAL,
                "%s=%s asks for instructions this CPU does not have (it runs up to %s); "
                "use a level up to %s, or unset it",
                source, rp_isa_name(level), rp_isa_name(cpu), rp_isa_name(cpu));
}

/* The real CPU's check; a refused amx also says which of its parts failed. */
static rp_status check_runs(rp_isa level, const char *source) {
  rp_status s = rp_isa_check_cpu(level, rp_isa_cpu(), source);
  if (s == RP_OK || level != RP_ISA_AMX || !g_amx_why[0]) return s;
  char msg[512];
  snprintf(msg, sizeof msg, "%s", rp_errmsg());
  return rp_err(s, "%s (amx: %s)", msg, g_amx_why);
}

static void apply_env(void) {
  g_ceiling = rp_isa_cpu();
  const char *v = getenv(RP_ISA_ENV);
  if (!v || !v[0]) return;
  rp_isa level;
  rp_status s = rp_isa_parse(v, RP_ISA_ENV, &level);
  if (s == RP_OK) s = check_runs(level, RP_ISA_ENV);
  if (s != RP_OK) {
    g_env_status = s;
    snprintf(g_env_msg, sizeof g_env_msg, "%s", rp_errmsg());
    return;
  }
  g_ceiling = level;
  snprintf(g_source, sizeof g_source, "%s", RP_ISA_ENV);
}

rp_status rp_isa_init(void) {
  pthread_once(&g_env_once, apply_env);
  if (g_env_status != RP_OK) return rp_err(g_env_status, "%s", g_env_msg);
  return RP_OK;
}

static rp_status set_level(rp_isa level, const char *source) {
  pthread_once(&g_env_once, apply_env);
  if (level < RP_ISA_SCALAR || level >= RP_ISA_LEVELS)
    return rp_err(RP_EINVAL, "instruction-set level %d unknown; use one of " VALID_NAMES,
                  (int)level);
  RP_TRY(check_runs(level, source));
  /* an explicit setting replaces a bad RINGPIPE_ISA as well as a good one */
  g_env_status = RP_OK;
  g_ceiling = level;
  snprintf(g_source, sizeof g_source, "%s", source);
  return RP_OK;
}

rp_status rp_isa_request(const char *name, const char *source) {
  rp_isa level;
  RP_TRY(rp_isa_parse(name, source, &level));
  return set_level(level, source);
}

rp_status rp_isa_set(rp_isa level) { return set_level(level, "rp_isa_set"); }

rp_isa rp_isa_active(void) {
  if (rp_isa_init() != RP_OK) rp_fatal("%s", g_env_msg);
  return g_ceiling;
}

int rp_isa_allows(rp_isa level) { return level <= rp_isa_active(); }

const char *rp_isa_source(void) {
  rp_isa_active();
  return g_source;
}

const char *rp_isa_why_not(rp_isa level) {
  static const char *const cpu_lacks[RP_ISA_LEVELS] = {
      "", "the CPU lacks AVX2/FMA", "the CPU lacks AVX-512 F/BW/VL/DQ",
      "the CPU lacks AVX512-BF16", "the CPU lacks AVX512-BF16 (amx builds on it)"};
  static _Thread_local char buf[96];
  if (level < RP_ISA_SCALAR || level >= RP_ISA_LEVELS) return "unknown level";
  if (level > rp_isa_cpu()) return level == RP_ISA_AMX && g_amx_why[0] ? g_amx_why
                                                                        : cpu_lacks[level];
  if (level > rp_isa_active()) {
    snprintf(buf, sizeof buf, "above the ceiling %s (from %s)", rp_isa_name(rp_isa_active()),
             rp_isa_source());
    return buf;
  }
  return "";
}

const char *rp_isa_build_target(void) {
#if defined(__AVX512F__)
  return "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
  return "avx2";
#elif defined(__x86_64__)
  return "x86-64 baseline (SSE2)";
#else
  return "this build's target";
#endif
}

/* ---- cache size */

/* One core's cache of a level from /sys (cpu0), instruction caches skipped;
 * 0 when it says nothing */
static long read_sys_cache(int want_level) {
  char path[96], buf[32];
  for (int idx = 0; idx < 8; idx++) {
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", idx);
    FILE *f = fopen(path, "r");
    if (!f) break;
    int level = 0;
    int ok = fscanf(f, "%d", &level) == 1;
    fclose(f);
    if (!ok || level != want_level) continue;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", idx);
    f = fopen(path, "r");
    if (f) {
      ok = fgets(buf, sizeof buf, f) != NULL;
      fclose(f);
      if (ok && strncmp(buf, "Instruction", 11) == 0) continue;
    }
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", idx);
    f = fopen(path, "r");
    if (!f) continue;
    long v = 0;
    char unit = 0;
    ok = fgets(buf, sizeof buf, f) != NULL && sscanf(buf, "%ld%c", &v, &unit) >= 1;
    fclose(f);
    if (!ok || v <= 0) continue;
    if (unit == 'K') v <<= 10;
    if (unit == 'M') v <<= 20;
    return v;
  }
  return 0;
}

/* A cache's size from sysconf (sc_name, or -1 where the C library has none),
 * else /sys, else fallback; the CPU's answer never changes, so *cached holds
 * it (a benign race, the same value, at worst). */
static long cache_bytes(long *cached, int sc_name, int level, long fallback) {
  if (*cached > 0) return *cached;
  long v = sc_name >= 0 ? sysconf(sc_name) : 0;
  if (v <= 0) v = read_sys_cache(level);
  if (v <= 0) v = fallback;
  *cached = v;
  return v;
}

#ifndef _SC_LEVEL2_CACHE_SIZE
#define _SC_LEVEL2_CACHE_SIZE (-1)
#endif
#ifndef _SC_LEVEL1_DCACHE_SIZE
#define _SC_LEVEL1_DCACHE_SIZE (-1)
#endif

long rp_isa_l2_bytes(void) {
  static long cached = 0;
  return cache_bytes(&cached, _SC_LEVEL2_CACHE_SIZE, 2, 1L << 20);
}

long rp_isa_l1d_bytes(void) {
  static long cached = 0;
  return cache_bytes(&cached, _SC_LEVEL1_DCACHE_SIZE, 1, 48L << 10);
}
