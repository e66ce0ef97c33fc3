/* ringpipe sft | grpo | ppo: post-training with verifiable rewards. The jobs
 * live in src/rl (rp_rl_run); this file parses their options. */
#include <string.h>

#include "cli.h"
#include "ringpipe/rp_rl.h"

int rp_cmd_sft(int argc, char **argv);
int rp_cmd_grpo(int argc, char **argv);
int rp_cmd_ppo(int argc, char **argv);

static int run_job(rp_rl_algo algo, const char *usage, const char *desc, int argc, char **argv) {
  const char *name = rp_rl_algo_name(algo);
  int n;
  const rp_opt *tab = rp_rl_opt_table(algo, &n);
  rp_rl_opts o;
  memset(&o, 0, sizeof o);
  int rc = rp_cli_parse(name, usage, desc, tab, n, &o, argc, argv);
  if (rc >= 0) return rc;
  rp_status s = rp_rl_run(algo, &o);
  return s == RP_OK ? 0 : rp_cli_fail(name, s);
}

int rp_cmd_sft(int argc, char **argv) {
  return run_job(RP_RL_SFT, "ringpipe sft [--task add] [--steps N] [--out DIR] [options]",
                 "Supervised fine-tuning on a built-in task's prompt/answer pairs, loss on the "
                 "answer tokens only. Prints held-out exact-match accuracy; the checkpoint "
                 "(OUT/ckpt) starts `ringpipe grpo --init-from`.",
                 argc, argv);
}

int rp_cmd_grpo(int argc, char **argv) {
  return run_job(RP_RL_GRPO, "ringpipe grpo --init-from DIR [--task add] [options]",
                 "GRPO with verifiable rewards: G sampled answers per problem, group-relative "
                 "advantages, clipped ratio (clip-higher), optional k3 KL to the start policy, "
                 "three loss aggregations, dynamic sampling. Under mpirun, rollouts and "
                 "gradients are split over the ranks.",
                 argc, argv);
}

int rp_cmd_ppo(int argc, char **argv) {
  return run_job(RP_RL_PPO, "ringpipe ppo --init-from DIR [--task add] [options]",
                 "PPO with verifiable rewards for comparison with GRPO: a value head, GAE, "
                 "clipped value loss, per-token KL penalty in the reward.",
                 argc, argv);
}
