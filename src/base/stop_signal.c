/* Stop signals: the handler only records the signal (async-signal-safe); the
 * training loop decides what to do at a step boundary. See rp_stop.h. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "ringpipe/rp_stop.h"

static volatile sig_atomic_t stop_signal;
static const int stop_signals[] = {SIGTERM, SIGINT, SIGUSR1};
#define NSTOP ((int)(sizeof stop_signals / sizeof stop_signals[0]))

static void on_stop_signal(int sig) {
  if (stop_signal == 0) {
    stop_signal = sig;
    return;
  }
  if (sig == SIGINT) { /* Ctrl-C twice: the user wants out now */
    signal(SIGINT, SIG_DFL);
    raise(SIGINT);
  }
}

void rp_stop_install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART; /* blocking calls resume; the loop polls the flag */
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < NSTOP; i++) sigaction(stop_signals[i], &sa, NULL);
}

void rp_stop_uninstall(void) {
  for (int i = 0; i < NSTOP; i++) signal(stop_signals[i], SIG_DFL);
}

int rp_stop_requested(void) { return stop_signal; }

const char *rp_stop_signal_name(int sig) {
  static char buf[32];
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    default: snprintf(buf, sizeof buf, "signal %d", sig); return buf;
  }
}
