/* libamp: mixed-precision training in C. Include this one header for the whole public API
 * and the models of models/. */
#ifndef AMP_AMP_H
#define AMP_AMP_H

#include "amp/status.h"
#include "amp/tensor.h"
#include "amp/rng.h"
#include "amp/data.h"
#include "amp/nn.h"
#include "amp/optim.h"
#include "amp/mixed_precision.h"
#include "amp/checkpoint.h"
#include "amp/parallel.h"
#include "amp/profile.h"
#include "amp/memory.h"
/* The models a user picks by name (models/, over the headers above). */
#include "amp/models/mnist.h"
#include "amp/models/lm.h"
#include "amp/models/gpt.h"
#include "amp/models/llama.h"

#endif
