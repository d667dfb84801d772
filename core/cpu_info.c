/* The CPU's model name and features from /proc/cpuinfo, read once (Linux; elsewhere "unknown").
 * The kernel's flag names are used as they are, so figures quote what `lscpu` shows. */
#define _GNU_SOURCE
#include "core/cpu_info.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static const char *const amp_isa_flags[] = {"avx2",        "fma",         "f16c",
                                            "avx512f",     "avx512_bf16", "avx512_fp16",
                                            "amx_bf16",    "amx_tile"};
static char amp_model_name[128] = "unknown", amp_isa[160] = "none";
static pthread_once_t amp_cpu_once = PTHREAD_ONCE_INIT;

/* Whether the space-separated list holds the word. */
static int amp_has_word(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = strstr(list, word); p; p = strstr(p + 1, word))
        if ((p == list || p[-1] == ' ' || p[-1] == '\t') && (p[n] == ' ' || p[n] == '\n' || !p[n]))
            return 1;
    return 0;
}

static void amp_cpu_read(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[8192];
    int got_model = 0, got_flags = 0;
    while ((!got_model || !got_flags) && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        const char *value = colon + 1 + (colon[1] == ' ');
        if (!got_model && !strncmp(line, "model name", 10)) {
            snprintf(amp_model_name, sizeof amp_model_name, "%s", value);
            amp_model_name[strcspn(amp_model_name, "\n")] = '\0';
            got_model = 1;
        } else if (!got_flags && !strncmp(line, "flags", 5)) {
            size_t off = 0;
            for (size_t i = 0; i < sizeof amp_isa_flags / sizeof *amp_isa_flags; i++)
                if (amp_has_word(value, amp_isa_flags[i]) && off < sizeof amp_isa)
                    off += (size_t)snprintf(amp_isa + off, sizeof amp_isa - off, "%s%s",
                                            off ? " " : "", amp_isa_flags[i]);
            if (!off) snprintf(amp_isa, sizeof amp_isa, "none");
            got_flags = 1;
        }
    }
    fclose(f);
}

const char *amp_cpu_model(void) {
    pthread_once(&amp_cpu_once, amp_cpu_read);
    return amp_model_name;
}

const char *amp_cpu_isa(void) {
    pthread_once(&amp_cpu_once, amp_cpu_read);
    return amp_isa;
}
