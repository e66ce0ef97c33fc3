/* The run report (src/io/report_html.c): one self-contained HTML page from a
 * run directory (metrics.jsonl, ckpt/meta.json, pipeline.svg): loss and
 * validation curves, tokens/s and MFU, learning rate and gradient norm, RL
 * reward, KL and held-out accuracy, memory by category against the formulas,
 * and for pipelined runs the measured timeline under the simulated one. */
#ifndef RP_REPORT_H
#define RP_REPORT_H

#include "rp_base.h"

/* Writes out_path atomically; RP_EINVAL if run_dir has no metrics.jsonl. */
rp_status rp_report_write(const char *run_dir, const char *out_path);

#endif
