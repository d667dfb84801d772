/* libamp: mixed-precision training in C. Include this one header for the whole public API. */
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

#endif
