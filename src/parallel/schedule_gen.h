/* Generators that live beside schedule.c (not a public API): each fills every
 * rank's compute list of an empty schedule whose p, v, m and map are set. */
#ifndef RP_SCHEDULE_GEN_H
#define RP_SCHEDULE_GEN_H

#include "ringpipe/rp_schedule.h"

/* Zero-bubble list schedule (schedule_zb.c): at most `limit` chunk-activations
 * held per rank from F to W, a deferred W before a new chunk-0 F once w_first
 * are held (0: never); RP_EINVAL when the limit is too small to finish. */
rp_status rp_gen_zb_list(rp_schedule *s, int limit, int w_first);
/* ZB-V: the list with w_first = p or without the rule, whichever takes fewer
 * unit steps. */
rp_status rp_gen_zbv(rp_schedule *s, int limit);
/* Exchanges the action lists of two schedules of the same p (schedule.c). */
void rp_schedule_swap_lists(rp_schedule *a, rp_schedule *b);
/* V-Min as a repeated building block (schedule_vblock.c): a modulo schedule
 * of one micro-batch with 6 slots per rank; needs v = 2 and the V map, any m. */
rp_status rp_gen_vmin_block(rp_schedule *s);
/* DeepSeek's DualPipeV order (schedule_dualpipev.c); needs v = 2, the V map
 * and m >= 2p (checked by the caller). */
rp_status rp_gen_dualpipev(rp_schedule *s);

#endif
