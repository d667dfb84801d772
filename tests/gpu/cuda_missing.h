/* The CUDA backend's entries that test_backend_ops allows to be NULL in the cudacpu build
 * (AMP_CUDACPU=ON). There the CUDA backend runs on every machine, so a row it cannot run is a
 * FAILURE, not "not implemented" -- except for the entries listed here, which are still being
 * written. The list is kept honest both ways: a NULL entry missing from it fails its rows, and a
 * listed entry that the backend now fills fails the run until it is taken off the list. On a real
 * GPU the rows of a NULL entry still report "not implemented". Included by test_backend_ops.c
 * only, after its entries[] table. */
#ifndef AMP_TESTS_GPU_CUDA_MISSING_H
#define AMP_TESTS_GPU_CUDA_MISSING_H

#ifdef AMP_CUDACPU
typedef struct missing_entry {
    const char *member; /* the amp_backend member, as in entries[] */
    const char *why;
} missing_entry;
static const missing_entry cuda_missing[] = {
    {"conv2d_fwd", "not written yet, issue 9"},
    {"conv2d_bwd_data", "not written yet, issue 9"},
    {"conv2d_bwd_weight", "not written yet, issue 9"},
    {"bn_fwd_train", "not written yet, issue 9"},
    {"bn_fwd_eval", "not written yet, issue 9"},
    {"bn_bwd", "not written yet, issue 9"},
    {"maxpool_fwd", "not written yet, issue 9"},
    {"maxpool_bwd", "not written yet, issue 9"},
    {"sgd_update", "not written yet, issue 9"},
    {"adam_update", "not written yet, issue 9"},
};

/* Why an entry may be NULL on dev, or NULL when it may not (only the CUDA backend is held to
 * the list). */
static const char *missing_why(const amp_backend *dev, const char *member) {
    if (dev->device != AMP_DEVICE_CUDA) return "only the CUDA backend is held to this list";
    for (size_t i = 0; i < N_OF(cuda_missing); i++)
        if (!strcmp(cuda_missing[i].member, member)) return cuda_missing[i].why;
    return NULL;
}

/* Listed entries that dev fills after all (or that name no entry): each is a failure. */
static int stale_missing_entries(const amp_backend *dev) {
    if (dev->device != AMP_DEVICE_CUDA) return 0;
    int stale = 0;
    for (size_t i = 0; i < N_OF(cuda_missing); i++) {
        const entry_info *e = NULL;
        for (int k = 0; k < E_N && !e; k++)
            if (!strcmp(entries[k].member, cuda_missing[i].member)) e = &entries[k];
        void (*fn)(void) = NULL;
        if (e) memcpy(&fn, (const char *)dev + e->offset, sizeof fn);
        if (!e || fn) {
            printf("FAIL cuda_missing lists %s, but %s: take it off the list\n",
                   cuda_missing[i].member, e ? "the backend has it now" : "no entry has that name");
            stale++;
        }
    }
    return stale;
}
#else
static const char *missing_why(const amp_backend *dev, const char *member) {
    (void)dev;
    return member; /* every NULL entry is "not implemented" on a real device */
}
static int stale_missing_entries(const amp_backend *dev) {
    (void)dev;
    return 0;
}
#endif

#endif
