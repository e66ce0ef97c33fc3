/* Shared by the model's own files only. */
#ifndef RP_MODEL_INTERNAL_H
#define RP_MODEL_INTERNAL_H

#include "ringpipe/rp_model.h"

/* Input of layer i of a chunk: the chunk input, or the previous layer's output. */
const float *rp_layer_input(const rp_acts *a, int i);

#endif
