/* The state file of a checkpoint: master weights, optimizer state (torch.optim's names), loss
 * scalers, RNG, loader position, step, and the options and machine it was written with. */
#ifndef AMP_CHECKPOINT_CKPT_STATE_H
#define AMP_CHECKPOINT_CKPT_STATE_H

#include "amp/checkpoint.h"
#include "amp/rng.h"
#include "checkpoint/ckpt_tensors.h"

amp_status amp_ckpt_state_add(amp_st_writer *w, amp_ckpt_bufs *b, int64_t step, amp_model *m,
                              amp_optimizer *opt, const amp_checkpoint_opts *o);
/* Everything a load would apply, validated against this model/optimizer/loader. */
amp_status amp_ckpt_state_check(const amp_st_reader *r, const amp_model *m,
                                const amp_optimizer *opt, const amp_checkpoint_opts *o);
/* After both checks: the model (weights, or from the masters), masters, optimizer, scalers, RNG,
 * loader. `model` is the checked model file (or NULL: the state file alone). */
amp_status amp_ckpt_state_apply(const amp_st_reader *r, const amp_st_reader *model, amp_model *m,
                                amp_optimizer *opt, const amp_checkpoint_opts *o, int64_t *step);
/* Masters from the model file's weights (converted to f32), then the half model from them: what
 * an O2 run does with weights that come without masters. */
amp_status amp_ckpt_masters_from_weights(const amp_st_reader *model, amp_optimizer *opt);
/* The same from the n files of a sharded state_dict. */
amp_status amp_ckpt_masters_from_files(const amp_st_reader *const *rs, int n_files,
                                       amp_optimizer *opt);

#endif
