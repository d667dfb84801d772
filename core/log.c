/* stderr logging with a level taken once from AMP_LOG_LEVEL. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

static amp_log_level amp_log_threshold = AMP_LOG_INFO;
static pthread_once_t amp_log_once = PTHREAD_ONCE_INIT;

static void amp_log_init(void) {
    const char *env = getenv("AMP_LOG_LEVEL");
    if (!env) return;
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strcmp(env, names[i]) == 0) amp_log_threshold = (amp_log_level)i;
}

void amp_log_msg(amp_log_level level, const char *fmt, ...) {
    pthread_once(&amp_log_once, amp_log_init);
    if (level > amp_log_threshold) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "libamp: %s\n", line); /* one fprintf: lines of threads do not interleave */
}
