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

/* an array of `size`-byte elements, `n` of `*cap` used, with room for one more: `v` itself, or `v` grown to
   twice its capacity (`first` when it has none), `*cap` set; NULL where there is no memory (`v` is then
   left as it was) */
static void *room_for_one(void *v, Py_ssize_t n, Py_ssize_t *cap, size_t size, Py_ssize_t first) {
    if (n < *cap) return v;
    Py_ssize_t grown_cap = *cap ? *cap * 2 : first;
    void *grown = realloc(v, (size_t)grown_cap * size);
    if (grown) *cap = grown_cap;
    return grown;
}

static int vec_push(Vec *a, int64_t x) {
    int64_t *v = room_for_one(a->v, a->n, &a->cap, sizeof(int64_t), 256);
    if (!v) return -1;
    a->v = v;
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

/* the most slots one look-up probes: past it the piece steps aside (Python's dicts, whose hash is seeded,
   take it), so text made to collide costs a bounded number of comparisons a name, not one per name seen */
#define MAX_PROBES 256

static inline uint64_t mum(uint64_t a, uint64_t b) {
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static inline uint64_t load8(const char *p) {
    uint64_t x;
    memcpy(&x, p, 8);
    return x;
}

/* every byte of the text, 16 at a time (wyhash's mixing): names of one trace often share their length
   and both ends (a kernel's template arguments differ in the middle), so a hash of the ends alone put
   them all in one chain */
static inline uint64_t hash(const char *p, Py_ssize_t n) {
    const uint64_t k0 = 0xA0761D6478BD642FULL, k1 = 0xE7037ED1A0B428DBULL, k2 = 0x8EBC6AF09C88C6E3ULL;
    uint64_t h = (uint64_t)n * 0x9E3779B97F4A7C15ULL ^ k2, a, b;
    Py_ssize_t i = 0;
    for (; n - i > 16; i += 16) h = mum(load8(p + i) ^ k0 ^ h, load8(p + i + 8) ^ k1);
    Py_ssize_t rest = n - i; /* 0 to 16 bytes, read as two words (overlapping where fewer than 16) */
    if (n >= 16) {
        a = load8(p + n - 16);
        b = load8(p + n - 8);
    } else if (rest >= 8) {
        a = load8(p + i);
        b = load8(p + n - 8);
    } else {
        a = b = 0;
        for (Py_ssize_t j = 0; j < rest; j++) a = a << 8 | (unsigned char)p[i + j];
    }
    h = mum(a ^ k0 ^ h, b ^ k1);
    return mum(h ^ k2, (uint64_t)n ^ k0);
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
    for (int probes = 0; s->slots[j]; probes++) {
        int64_t k = s->slots[j] - 1;
        if (s->n[k] == n && memcmp(s->p[k], p, (size_t)n) == 0) return k;
        if (probes == MAX_PROBES) return -1;
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
