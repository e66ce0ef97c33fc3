/* The job loop of sft / grpo / ppo: steps, held-out evaluation, metrics
 * (OUT/metrics.jsonl, one JSON object per step), checkpoints (OUT/ckpt). */
#include <stdio.h>
#include <string.h>

#include "ringpipe/rp_json.h"
#include "ringpipe/rp_report.h"
#include "ringpipe/rp_tb.h"
#include "rl_internal.h"

typedef rp_status (*step_fn)(rp_rl_state *s, rp_rl_report *rep);

static void emit(rp_rl_state *s, const char *json) {
  if (!s->metrics) return;
  fputc('{', s->metrics);
  rp_json_fputs(s->metrics, json);  /* a NaN metric is written as null */
  fputs("}\n", s->metrics);
  fflush(s->metrics);
  if (s->tb) rp_tb_mirror_sync(s->tb);  /* a failed mirror write costs the run nothing */
}

static rp_status eval_into(rp_rl_state *s, char *buf, size_t cap, double *acc) {
  double r;
  buf[0] = '\0';
  *acc = -1;
  if (s->o.eval_n == 0) return RP_OK;
  RP_TRY(rp_rl_eval(s, acc, &r));
  snprintf(buf, cap, ",\"heldout_acc\":%.6f,\"heldout_reward\":%.6f", *acc, r);
  return RP_OK;
}

static rp_status run(rp_rl_state *s) {
  const rp_rl_opts *o = &s->o;
  const char *name = rp_rl_algo_name(s->algo);
  step_fn step = s->algo == RP_RL_SFT ? rp_sft_step : s->algo == RP_RL_GRPO ? rp_grpo_step
                                                                              : rp_ppo_step;
  int rank0 = s->grid.world_rank == 0;
  char ckpt[RP_OPT_STRLEN + 16], ev[160], line[2048];
  snprintf(ckpt, sizeof ckpt, "%s/ckpt", o->out);
  if (rank0)
    printf("%s: task %s size %d | model L=%d C=%d NH=%d T=%d (%zu params) | %d rank(s) x %d "
           "thread(s)%s%s%s\n",
           name, rp_task_name(o->task), o->task_size, s->cfg.L, s->cfg.C, s->cfg.NH, s->cfg.T,
           rp_gpt_num_params(&s->cfg), s->grid.dp, rp_pool_size(s->pool),
           o->init_from[0] ? " | from " : "", o->init_from,
           s->eng.exec.bf16 ? " | bf16 matmuls (rollouts decode in fp32)" : "");
  double acc0 = -1, acc = -1;
  if (s->step == 0) {
    RP_TRY(eval_into(s, ev, sizeof ev, &acc0));
    snprintf(line, sizeof line, "\"step\":0%s", ev);
    if (ev[0]) emit(s, line);
    if (rank0 && acc0 >= 0) printf("step %5d | held-out accuracy %.4f\n", 0, acc0);
  }
  int saved_at = -1;
  while (s->step < o->steps) {
    rp_rl_report rep;
    RP_TRY(step(s, &rep));
    int k = s->step;
    ev[0] = '\0';
    int do_eval = (o->eval_every > 0 && k % o->eval_every == 0) || k == o->steps;
    if (do_eval) RP_TRY(eval_into(s, ev, sizeof ev, &acc));
    snprintf(line, sizeof line, "\"step\":%d,%s%s", k, rep.json, ev);
    emit(s, line);
    if (rank0 && ((!o->quiet && k % o->log_every == 0) || do_eval)) {
      printf("step %5d | %s", k, rep.line);
      if (do_eval && acc >= 0) printf(" | held-out accuracy %.4f", acc);
      printf("\n");
      fflush(stdout);
    }
    if (o->ckpt_every > 0 && k % o->ckpt_every == 0) {
      RP_TRY(rp_rl_save(s, ckpt));
      saved_at = k;
    }
  }
  if (saved_at != s->step) RP_TRY(rp_rl_save(s, ckpt));
  if (rank0) {
    if (acc0 >= 0 && acc >= 0)
      printf("%s done: held-out accuracy %.4f -> %.4f (%+.1f points); checkpoint %s\n", name,
             acc0, acc, 100 * (acc - acc0), ckpt);
    else
      printf("%s done at step %d; checkpoint %s\n", name, s->step, ckpt);
    char report[RP_OPT_STRLEN + 16];
    snprintf(report, sizeof report, "%s/report.html", o->out);
    if (s->tb) rp_tb_mirror_sync(s->tb);
    if (rp_report_write(o->out, report) == RP_OK)
      printf("report: %s (open it in a browser)\n", report);
    else
      rp_warn("no report: %s", rp_errmsg());
  }
  return RP_OK;
}

rp_status rp_rl_run(rp_rl_algo algo, const rp_rl_opts *o) {
  rp_rl_state s;
  rp_status st = rp_rl_state_init(&s, algo, o);
  if (st == RP_OK) st = run(&s);
  rp_rl_state_free(&s);
  return st;
}
