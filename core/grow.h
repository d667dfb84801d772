/* The growable arrays of the library (a tape, listeners, kept tensors, a model's entries, cast
 * caches): n items used of cap allocated, doubled when full. */
#ifndef AMP_CORE_GROW_H
#define AMP_CORE_GROW_H

#include <stddef.h>
#include <stdlib.h>

/* Room for one more item: items as it is while n < *cap, else moved to twice *cap (first_cap the
 * first time) and *cap updated. NULL when out of memory, with items and *cap as they were (the
 * caller still owns items). */
static inline void *amp_grow(void *items, int n, int *cap, int first_cap, size_t item_size) {
    if (n < *cap) return items;
    int c = *cap ? 2 * *cap : first_cap;
    void *p = realloc(items, (size_t)c * item_size);
    if (p) *cap = c;
    return p;
}

#endif
