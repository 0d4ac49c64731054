/* The C reader's growable columns and its table of distinct texts (included by _kineto_fast.c only, after
   Python.h). */

#ifndef KINETO_STORE_H
#define KINETO_STORE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t *v;
    Py_ssize_t n, cap;
} Vec;

static int vec_push(Vec *a, int64_t x) {
    if (a->n == a->cap) {
        Py_ssize_t cap = a->cap ? a->cap * 2 : 256;
        int64_t *v = realloc(a->v, (size_t)cap * sizeof(int64_t));
        if (!v) return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

/* distinct spans of text in order of first sight, and a hash table of them */
typedef struct {
    const char **p;
    Py_ssize_t *n;
    int *esc;
    Py_ssize_t count, cap;
    int64_t *slots; /* id + 1, 0 empty */
    Py_ssize_t nslots;
} Strings;

/* the length and up to 16 bytes at each end: names of one trace differ there (a kernel's template
   arguments, an operator's name); a collision only costs a comparison */
static inline uint64_t hash(const char *p, Py_ssize_t n) {
    uint64_t a = 0, b = 0;
    if (n >= 16) {
        uint64_t w[4];
        memcpy(&w[0], p, 8);
        memcpy(&w[1], p + 8, 8);
        memcpy(&w[2], p + n - 16, 8);
        memcpy(&w[3], p + n - 8, 8);
        a = w[0] ^ (w[1] * 0x9E3779B97F4A7C15ULL);
        b = w[2] ^ (w[3] * 0xC2B2AE3D27D4EB4FULL);
    } else {
        for (Py_ssize_t i = 0; i < n; i++) a = (a << 8 | (a >> 56)) ^ (unsigned char)p[i];
    }
    uint64_t h = (a ^ (b << 1) ^ (uint64_t)n * 0x165667B19E3779F9ULL) * 0xFF51AFD7ED558CCDULL;
    return h ^ (h >> 31);
}

static int64_t strings_id(Strings *s, const char *p, Py_ssize_t n, int esc) {
    if (s->count * 2 >= s->nslots) {
        Py_ssize_t nslots = s->nslots ? s->nslots * 2 : 64;
        int64_t *slots = calloc((size_t)nslots, sizeof(int64_t));
        if (!slots) return -1;
        for (Py_ssize_t k = 0; k < s->count; k++) {
            uint64_t j = hash(s->p[k], s->n[k]) & (uint64_t)(nslots - 1);
            while (slots[j]) j = (j + 1) & (uint64_t)(nslots - 1);
            slots[j] = k + 1;
        }
        free(s->slots);
        s->slots = slots;
        s->nslots = nslots;
    }
    uint64_t j = hash(p, n) & (uint64_t)(s->nslots - 1);
    while (s->slots[j]) {
        int64_t k = s->slots[j] - 1;
        if (s->n[k] == n && memcmp(s->p[k], p, (size_t)n) == 0) return k;
        j = (j + 1) & (uint64_t)(s->nslots - 1);
    }
    if (s->count == s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 64;
        const char **np_ = realloc(s->p, (size_t)cap * sizeof(char *));
        if (!np_) return -1;
        s->p = np_;
        Py_ssize_t *nn = realloc(s->n, (size_t)cap * sizeof(Py_ssize_t));
        if (!nn) return -1;
        s->n = nn;
        int *ne = realloc(s->esc, (size_t)cap * sizeof(int));
        if (!ne) return -1;
        s->esc = ne;
        s->cap = cap;
    }
    s->p[s->count] = p;
    s->n[s->count] = n;
    s->esc[s->count] = esc;
    s->slots[j] = s->count + 1;
    return s->count++;
}

static void strings_free(Strings *s) {
    free(s->p);
    free(s->n);
    free(s->esc);
    free(s->slots);
}

#endif
