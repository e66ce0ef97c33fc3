/* Graceful stop on a signal: SIGTERM (scancel, kill), SIGINT (Ctrl-C) and
 * SIGUSR1 (Slurm's --signal pre-emption warning; Open MPI's mpirun forwards it
 * to every rank) only set a flag. The training loop reads the flag at each step
 * boundary, the ranks agree on it, save the same step and exit together.
 *
 * A second SIGINT terminates at once (the default action): Ctrl-C twice is a
 * hard stop. A second SIGTERM or SIGUSR1 is ignored, so that a time limit's
 * SIGTERM after the pre-emption warning does not kill a save in progress. */
#ifndef RP_STOP_H
#define RP_STOP_H

/* Installs the handlers (sigaction, SA_RESTART). Safe to call again. */
void rp_stop_install(void);
/* Puts the default actions back. */
void rp_stop_uninstall(void);
/* The first signal received since rp_stop_install, 0 if none. */
int rp_stop_requested(void);
/* "SIGTERM", "SIGINT", "SIGUSR1", or "signal N". */
const char *rp_stop_signal_name(int sig);

#endif
