/* The op profile's counts and switches (amp/profile.h), apart from the counting functions of
 * core/profile.c so that a device kernel file can report its host waits while linked alone
 * (the cudacpu kernel tests). */
#include <string.h>

#include "core/profile.h"

bool amp_profile_on = false;
bool amp_profile_timed = false;
amp_op_profile amp_profile_counts;

void amp_profile_begin(bool timed) {
    memset(&amp_profile_counts, 0, sizeof amp_profile_counts);
    amp_profile_timed = timed;
    amp_profile_on = true;
}

void amp_profile_read(amp_op_profile *out) {
    if (out) *out = amp_profile_counts;
}

void amp_profile_end(amp_op_profile *out) {
    amp_profile_on = false;
    amp_profile_read(out);
}

void amp_profile_host_wait(void) {
    if (amp_profile_on) amp_profile_counts.host_waits++;
}

const char *amp_op_category_name(amp_op_category c) {
    static const char *const names[AMP_OPCAT_N] = {"gemm/conv", "norm", "elementwise", "cast",
                                                   "optimizer"};
    return c >= 0 && c < AMP_OPCAT_N ? names[c] : NULL;
}
