/* amp-train's stop on SIGTERM (a scheduler about to kill the job) or SIGINT: the handler only
 * sets a flag; the training loop finishes its step, saves a checkpoint and exits 0. Under mpirun
 * the launcher passes the signal to every process, but not at the same step: stop_signal_agree,
 * called by every rank after each step, stops them all at the step where any one saw it, so the
 * final save (a collective) stays in step. The flag is static: each program file that includes
 * this installs and polls its own (amp_train.c for the image models, train_lm.c for the language models). */
#ifndef EXAMPLES_STOP_SIGNAL_H
#define EXAMPLES_STOP_SIGNAL_H

#include <signal.h>
#include <stdbool.h>

#include "amp/amp.h"

static volatile sig_atomic_t g_stop;

static void on_stop_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

static inline void stop_signal_install(void) {
    struct sigaction stop = {.sa_handler = on_stop_signal, .sa_flags = SA_RESTART};
    sigaction(SIGTERM, &stop, NULL);
    sigaction(SIGINT, &stop, NULL);
}

/* *stop: whether any rank saw the signal; `flag` rides along in the same MAX all-reduce (any
 * rank's true makes every rank's true). A failed agreement is an error, never a quiet stop: a
 * rank that stopped alone would meet its peers' next collective with another one. */
static inline amp_status stop_signal_agree(amp_comm *comm, bool *stop, bool *flag) {
    double f[2] = {g_stop, flag && *flag};
    if (amp_comm_is_distributed(comm)) {
        amp_status s = amp_comm_allreduce_max_f64(comm, f, 2);
        if (s != AMP_OK) return s;
    }
    if (f[0] != 0) g_stop = 1;
    *stop = f[0] != 0;
    if (flag) *flag = f[1] != 0;
    return AMP_OK;
}

#endif
