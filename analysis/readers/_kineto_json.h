/* JSON as the C reader scans it (included by _kineto_fast.c only, after Python.h): a value's text located
   and checked, never decoded into objects; strings with their escapes checked, numbers with an integer's
   value where it has up to 18 digits. Every function sets Parser.fail where the text is not JSON. */

#ifndef KINETO_JSON_H
#define KINETO_JSON_H

#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define MAX_DEPTH 64
/* an integer of more digits is not this reader's to decide, even where it is skipped: Python's parsers
   refuse one past their limit (sys.get_int_max_str_digits(), 4,300 unless set; 640 at the least) */
#define MAX_DIGITS 640

enum { V_ABSENT = 0, V_INT, V_BIGINT, V_FLOAT, V_STR, V_NULL, V_BOOL, V_ARRAY, V_OBJECT };

typedef struct {
    const char *p; /* a string's text without its quotes, a number's text, or a value's raw JSON */
    Py_ssize_t n;
    int kind;
    int esc;       /* a string with a backslash */
    int64_t i;     /* V_INT's value */
} Val;

typedef struct {
    const char *p, *end;
    int fail;
} Parser;

static inline __attribute__((always_inline)) void ws(Parser *ps) {
    const char *p = ps->p, *end = ps->end;
    if (p < end && (unsigned char)*p > ' ') return; /* most tokens follow one another or one space */
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    ps->p = p;
}

/* the length of a valid UTF-8 sequence at p (as Python's decoder takes it), 0 if invalid */
static int utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0];
    if (c < 0xC2) return 0;
    if (c < 0xE0) return (end - p >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
    if (c < 0xF0) {
        if (end - p < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0; /* overlong */
        if (c == 0xED && p[1] >= 0xA0) return 0; /* a surrogate */
        return 3;
    }
    if (c < 0xF5) {
        if (end - p < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0;
        if (c == 0xF4 && p[1] >= 0x90) return 0;
        return 4;
    }
    return 0;
}

static inline int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* a string at ps->p (its opening quote): its text into v; escapes checked, not decoded */
static inline __attribute__((always_inline)) void parse_string(Parser *ps, Val *v) {
    const unsigned char *p = (const unsigned char *)ps->p + 1, *end = (const unsigned char *)ps->end;
    const unsigned char *start = p;
    int esc = 0;
    for (;;) {
#ifdef __SSE2__
        /* 16 bytes at a time to the next quote, backslash, control character or non-ASCII byte (signed:
           bytes from 0x80 compare below 0x20 too) */
        const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
        while (end - p >= 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)p);
            int m = _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, backslash)),
                                                   _mm_cmplt_epi8(x, space)));
            if (m) { p += __builtin_ctz((unsigned)m); break; }
            p += 16;
        }
#endif
        while (p < end && *p >= 0x20 && *p != '"' && *p != '\\' && *p < 0x80) p++;
        if (p >= end) { ps->fail = 1; return; }
        unsigned char c = *p;
        if (c == '"') break;
        if (c < 0x20) { ps->fail = 1; return; }
        if (c == '\\') {
            esc = 1;
            if (p + 1 >= end) { ps->fail = 1; return; }
            char e = (char)p[1];
            if (e == 'u') {
                if (end - p < 6 || hexval(p[2]) < 0 || hexval(p[3]) < 0 || hexval(p[4]) < 0 || hexval(p[5]) < 0) {
                    ps->fail = 1;
                    return;
                }
                p += 6;
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' ||
                       e == 't') {
                p += 2;
            } else {
                ps->fail = 1;
                return;
            }
            continue;
        }
        int k = utf8_len(p, end);
        if (!k) { ps->fail = 1; return; }
        p += k;
    }
    v->kind = V_STR;
    v->p = (const char *)start;
    v->n = (Py_ssize_t)(p - start);
    v->esc = esc;
    ps->p = (const char *)p + 1;
}

/* a number at ps->p, as JSON writes one; an integer of up to 18 digits also as its value */
static inline __attribute__((always_inline)) void parse_number(Parser *ps, Val *v) {
    const char *p = ps->p, *end = ps->end, *start = p;
    int neg = 0;
    if (p < end && *p == '-') { neg = 1; p++; }
    if (p >= end || (unsigned)(*p - '0') > 9) { ps->fail = 1; return; }
    const char *digits = p;
    int64_t x = 0;
    if (*p == '0') p++;
    else
        while (p < end && (unsigned)(*p - '0') <= 9) {
            if (p - digits < 18) x = x * 10 + (*p - '0');
            p++;
        }
    Py_ssize_t ndigits = p - digits;
    int is_float = 0;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || (unsigned)(*p - '0') > 9) { ps->fail = 1; return; }
        while (p < end && (unsigned)(*p - '0') <= 9) p++;
        is_float = 1;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || (unsigned)(*p - '0') > 9) { ps->fail = 1; return; }
        while (p < end && (unsigned)(*p - '0') <= 9) p++;
        is_float = 1;
    }
    if (!is_float && ndigits > MAX_DIGITS) { ps->fail = 1; return; }
    v->p = start;
    v->n = p - start;
    v->esc = 0;
    v->kind = is_float ? V_FLOAT : ndigits > 18 ? V_BIGINT : V_INT;
    v->i = neg ? -x : x;
    ps->p = p;
}

static void skip_other(Parser *ps, Val *v, int depth);

/* any value at ps->p: strings and numbers read, containers and literals checked and passed over */
static inline __attribute__((always_inline)) void skip_value(Parser *ps, Val *v, int depth) {
    if (ps->p < ps->end) {
        char c = *ps->p;
        if (c == '"') { parse_string(ps, v); return; }
        if ((unsigned)(c - '0') <= 9 || c == '-') { parse_number(ps, v); return; }
    }
    skip_other(ps, v, depth);
}

/* `"key":` at ps->p, with the whitespace around the colon; sets fail where it is not there */
static inline __attribute__((always_inline)) void object_key(Parser *ps, Val *k) {
    if (ps->p >= ps->end || *ps->p != '"') { ps->fail = 1; return; }
    parse_string(ps, k);
    if (ps->fail) return;
    ws(ps);
    if (ps->p >= ps->end || *ps->p != ':') { ps->fail = 1; return; }
    ps->p++;
    ws(ps);
}

/* after a member of a container: 1 where a `,` leads to another, 0 at the closing `close` (or a failure) */
static inline __attribute__((always_inline)) int next_member(Parser *ps, char close) {
    if (ps->fail) return 0;
    ws(ps);
    if (ps->p < ps->end && *ps->p == ',') { ps->p++; ws(ps); return 1; }
    if (ps->p < ps->end && *ps->p == close) { ps->p++; return 0; }
    ps->fail = 1;
    return 0;
}

/* past the opening `{` or `[` at ps->p: 1 where a member follows, 0 where the container is empty (its
   closing `close` passed too) */
static inline __attribute__((always_inline)) int container_open(Parser *ps, char close) {
    ps->p++;
    ws(ps);
    if (ps->p < ps->end && *ps->p == close) { ps->p++; return 0; }
    return 1;
}

/* an object's `"key":` whose text has no escape, as the readers of named members take it: 0, with fail
   set, where it is not one (the caller steps aside) */
static inline __attribute__((always_inline)) int plain_key(Parser *ps, Val *k) {
    object_key(ps, k);
    if (ps->fail || k->esc) { ps->fail = 1; return 0; }
    return 1;
}

static void skip_container(Parser *ps, int depth) {
    char close = *ps->p == '{' ? '}' : ']';
    int object = close == '}';
    if (!container_open(ps, close)) return;
    do {
        Val v;
        if (object) {
            object_key(ps, &v);
            if (ps->fail) return;
        }
        skip_value(ps, &v, depth + 1);
    } while (next_member(ps, close));
}

static void skip_other(Parser *ps, Val *v, int depth) {
    v->kind = V_ABSENT;
    if (ps->p >= ps->end || depth > MAX_DEPTH) { ps->fail = 1; return; }
    const char *start = ps->p;
    switch (*ps->p) {
    case '"': parse_string(ps, v); return;
    case '{': case '[':
        v->kind = *ps->p == '{' ? V_OBJECT : V_ARRAY;
        skip_container(ps, depth);
        break;
    case 't':
        if (ps->end - ps->p < 4 || memcmp(ps->p, "true", 4)) { ps->fail = 1; return; }
        v->kind = V_BOOL; ps->p += 4;
        break;
    case 'f':
        if (ps->end - ps->p < 5 || memcmp(ps->p, "false", 5)) { ps->fail = 1; return; }
        v->kind = V_BOOL; ps->p += 5;
        break;
    case 'n':
        if (ps->end - ps->p < 4 || memcmp(ps->p, "null", 4)) { ps->fail = 1; return; }
        v->kind = V_NULL; ps->p += 4;
        break;
    default:
        parse_number(ps, v);
        return;
    }
    v->p = start;
    v->n = ps->p - start;
}

static inline int key_is(const Val *k, const char *s, Py_ssize_t n) {
    return k->n == n && memcmp(k->p, s, (size_t)n) == 0;
}
#define KEY(k, lit) key_is(k, lit, (Py_ssize_t)sizeof(lit) - 1)

#endif
