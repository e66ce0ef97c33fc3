/* Stand-alone `ringpipe sim` for the schedule tests: the real binary's main.c
 * dispatches `ringpipe sim ...` to the same rp_cmd_sim. */
int rp_cmd_sim(int argc, char **argv);

int main(int argc, char **argv) { return rp_cmd_sim(argc - 1, argv + 1); }
