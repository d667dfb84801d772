/* The CPU's model name and features from /proc/cpuinfo, read once (Linux; elsewhere "unknown"
 * and the baseline level). The kernel's flag names are used as they are, so figures quote what
 * `lscpu` shows; the level they make is capped by AMP_CPU_ISA (cpu_info.h). */
#define _GNU_SOURCE
#include "core/cpu_info.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"

/* Each level's name (AMP_CPU_ISA's spelling, oneDNN's) and the flags it needs beyond the level
 * below; the reported features are the first group of each reached level. */
static const struct {
    const char *name;
    const char *shown;  /* the features amp_cpu_isa lists for this level */
    const char *needed; /* what the CPU must also have for it */
} amp_levels[] = {
    [AMP_CPU_SSE41] = {"sse41", "", ""},
    [AMP_CPU_AVX2] = {"avx2", "avx2 fma f16c", "avx2 fma f16c"},
    [AMP_CPU_AVX512_CORE] = {"avx512_core", "avx512f", "avx512f avx512bw avx512vl avx512dq"},
    [AMP_CPU_AVX512_CORE_BF16] = {"avx512_core_bf16", "avx512_bf16", "avx512_bf16"},
    [AMP_CPU_AVX512_CORE_FP16] = {"avx512_core_fp16", "avx512_fp16", "avx512_fp16"},
    [AMP_CPU_AVX512_CORE_AMX] = {"avx512_core_amx", "amx_bf16 amx_tile", "amx_bf16 amx_tile"},
};
enum { AMP_N_LEVELS = sizeof amp_levels / sizeof *amp_levels };

static char amp_model_name[128] = "unknown", amp_isa[160] = "none", amp_cap[64] = "";
static amp_cpu_level amp_level = AMP_CPU_SSE41;
static int amp_cap_bad; /* AMP_CPU_ISA is set to a name that is no level */
static pthread_once_t amp_cpu_once = PTHREAD_ONCE_INIT;

/* Whether the space-separated list holds the word. */
static int amp_has_word(const char *list, const char *word, size_t n) {
    for (const char *p = strstr(list, word); p; p = strstr(p + 1, word))
        if ((p == list || p[-1] == ' ' || p[-1] == '\t') && (p[n] == ' ' || p[n] == '\n' || !p[n]))
            return 1;
    return 0;
}

/* Whether flags holds every word of the space-separated list want. */
static int amp_has_all(const char *flags, const char *want) {
    for (const char *w = want; *w;) {
        size_t n = strcspn(w, " ");
        char word[32];
        snprintf(word, sizeof word, "%.*s", (int)n, w);
        if (!amp_has_word(flags, word, n)) return 0;
        w += n + (w[n] == ' ');
    }
    return 1;
}

/* The CPU's own level from its flags line: the highest level whose needs, and every lower
 * level's, are all there. */
static amp_cpu_level amp_level_of(const char *flags) {
    amp_cpu_level l = AMP_CPU_SSE41;
    while (l + 1 < AMP_N_LEVELS && amp_has_all(flags, amp_levels[l + 1].needed)) l++;
    return l;
}

static void amp_cpu_read(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[8192];
    int got_model = 0, got_flags = 0;
    while (f && (!got_model || !got_flags) && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        const char *value = colon + 1 + (colon[1] == ' ');
        if (!got_model && !strncmp(line, "model name", 10)) {
            snprintf(amp_model_name, sizeof amp_model_name, "%s", value);
            amp_model_name[strcspn(amp_model_name, "\n")] = '\0';
            got_model = 1;
        } else if (!got_flags && !strncmp(line, "flags", 5)) {
            amp_level = amp_level_of(value);
            got_flags = 1;
        }
    }
    if (f) fclose(f);
    const char *cap = getenv("AMP_CPU_ISA");
    if (cap && *cap) {
        snprintf(amp_cap, sizeof amp_cap, "%s", cap);
        int k = 0;
        while (k < AMP_N_LEVELS && strcasecmp(cap, amp_levels[k].name)) k++;
        if (k < AMP_N_LEVELS && (amp_cpu_level)k < amp_level) amp_level = (amp_cpu_level)k;
        amp_cap_bad = k == AMP_N_LEVELS && strcasecmp(cap, "all") && strcasecmp(cap, "default");
    }
    size_t off = 0;
    for (int k = 1; k <= (int)amp_level && off < sizeof amp_isa; k++)
        off += (size_t)snprintf(amp_isa + off, sizeof amp_isa - off, "%s%s", off ? " " : "",
                                amp_levels[k].shown);
    if (!off) snprintf(amp_isa, sizeof amp_isa, "none");
}

const char *amp_cpu_model(void) {
    pthread_once(&amp_cpu_once, amp_cpu_read);
    return amp_model_name;
}

amp_cpu_level amp_cpu_level_get(void) {
    pthread_once(&amp_cpu_once, amp_cpu_read);
    return amp_level;
}

const char *amp_cpu_level_name(amp_cpu_level level) {
    return (int)level >= 0 && (int)level < AMP_N_LEVELS ? amp_levels[level].name : "unknown";
}

const char *amp_cpu_isa(void) {
    pthread_once(&amp_cpu_once, amp_cpu_read);
    return amp_isa;
}

const char *amp_cpu_isa_cap(void) {
    pthread_once(&amp_cpu_once, amp_cpu_read);
    return amp_cap;
}

amp_status amp_cpu_isa_check(void) {
    pthread_once(&amp_cpu_once, amp_cpu_read);
    if (!amp_cap_bad) return AMP_OK;
    return amp_fail(AMP_ERR_INVALID_ARG,
                    "AMP_CPU_ISA='%s' is not an instruction-set level: set it to one of sse41, "
                    "avx2, avx512_core, avx512_core_bf16, avx512_core_fp16, avx512_core_amx or "
                    "all, or unset it", amp_cap);
}
