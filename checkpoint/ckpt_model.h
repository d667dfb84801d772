/* The model file of a checkpoint: the model's parameters and buffers under PyTorch's state_dict
 * names, in the model's dtypes, plus each batch norm's num_batches_tracked (an int64 scalar). */
#ifndef AMP_CHECKPOINT_CKPT_MODEL_H
#define AMP_CHECKPOINT_CKPT_MODEL_H

#include "amp/nn.h"
#include "checkpoint/ckpt_tensors.h"

amp_status amp_ckpt_model_add(amp_st_writer *w, amp_ckpt_bufs *b, amp_model *m);
/* Strict: every parameter and buffer present with the model's shape in a float dtype, every
 * num_batches_tracked present, nothing else. AMP_ERR_SHAPE naming the culprits. */
amp_status amp_ckpt_model_check(const amp_st_reader *r, const amp_model *m);
/* After a check: the values into the model (converted), and the batch-norm counters. With
 * skip_params the parameters are left alone (they come from master weights). */
amp_status amp_ckpt_model_apply(const amp_st_reader *r, amp_model *m, bool skip_params);
/* The same over n files that hold the tensors between them (a sharded state_dict): each tensor
 * in exactly one of them, nothing unknown in any. */
amp_status amp_ckpt_model_check_files(const amp_st_reader *const *rs, int n_files,
                                      const amp_model *m);
amp_status amp_ckpt_model_apply_files(const amp_st_reader *const *rs, int n_files, amp_model *m,
                                      bool skip_params);

#endif
