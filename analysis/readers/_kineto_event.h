/* One trace event as the C reader parses it: the fields it uses, as spans of the piece, and the `args` keys
   it uses, launch dimensions packed as kineto_columns does (included by _kineto_fast.c only, after
   Python.h). */

#ifndef KINETO_EVENT_H
#define KINETO_EVENT_H

#include <stdint.h>

#include "_kineto_json.h"

#define NULLV (-INT64_MAX) /* analysis.readers.NULL */

/* launch dimensions [x, y, z] packed as kineto_columns._dims does; NULLV where not three integers in range */
static int64_t dims_value(Parser *ps, int s0, int s1) {
    int64_t d[3];
    int n = 0, ok = 1;
    if (!container_open(ps, ']')) return NULLV;
    do {
        Val v;
        skip_value(ps, &v, 2);
        if (ps->fail) return NULLV;
        if (n < 3 && v.kind == V_INT && v.i >= 0) d[n] = v.i;
        else ok = 0;
        n++;
    } while (next_member(ps, ']'));
    if (ps->fail || !ok || n != 3) return NULLV;
    if (d[0] >= ((int64_t)1 << (63 - s0)) || d[1] >= ((int64_t)1 << (s0 - s1)) || d[2] >= ((int64_t)1 << s1))
        return NULLV;
    return (d[0] << s0) + (d[1] << s1) + d[2];
}

enum { A_CORRELATION, A_STREAM, A_DEVICE, A_BYTES, A_EXTERNAL, A_INPUT_DIMS, A_NAME, A_GRID, A_BLOCK, NARGS };

typedef struct {
    Val f[NARGS];
    int64_t grid, block;
} Args;

typedef struct {
    Val ph, cat, name, pid, tid, ts, dur, args;
    Args a;
} Event;

/* an args object: the keys the reader uses; a key seen twice fails (the caller steps aside) */
static void parse_args(Parser *ps, Args *a) {
    if (!container_open(ps, '}')) return;
    do {
        Val k;
        if (!plain_key(ps, &k)) return;
        int field = -1;
        switch (k.n) {
        case 4: if (KEY(&k, "grid")) field = A_GRID; else if (KEY(&k, "name")) field = A_NAME; break;
        case 5: if (KEY(&k, "bytes")) field = A_BYTES; else if (KEY(&k, "block")) field = A_BLOCK; break;
        case 6: if (KEY(&k, "stream")) field = A_STREAM; else if (KEY(&k, "device")) field = A_DEVICE; break;
        case 10: if (KEY(&k, "Input Dims")) field = A_INPUT_DIMS; break;
        case 11: if (KEY(&k, "correlation")) field = A_CORRELATION; else if (KEY(&k, "External id")) field = A_EXTERNAL; break;
        }
        if (field < 0) {
            Val v;
            skip_value(ps, &v, 2);
        } else {
            Val *v = &a->f[field];
            if (v->kind != V_ABSENT) { ps->fail = 1; return; }
            if ((field == A_GRID || field == A_BLOCK) && ps->p < ps->end && *ps->p == '[') {
                int64_t packed = field == A_GRID ? dims_value(ps, 32, 16) : dims_value(ps, 22, 11);
                v->kind = V_ARRAY;
                if (field == A_GRID) a->grid = packed; else a->block = packed;
            } else {
                skip_value(ps, v, 2);
            }
        }
    } while (next_member(ps, '}'));
}

static void parse_event(Parser *ps, Event *e) {
    e->ph.kind = e->cat.kind = e->name.kind = e->pid.kind = e->tid.kind = e->ts.kind = e->dur.kind = V_ABSENT;
    e->args.kind = V_ABSENT;
    for (int i = 0; i < NARGS; i++) e->a.f[i].kind = V_ABSENT;
    e->a.grid = e->a.block = NULLV;
    if (!container_open(ps, '}')) return;
    do {
        Val k;
        if (!plain_key(ps, &k)) return;
        Val *slot = NULL;
        switch (k.n) {
        case 2:
            if (KEY(&k, "ph")) slot = &e->ph;
            else if (KEY(&k, "ts")) slot = &e->ts;
            break;
        case 3:
            if (KEY(&k, "cat")) slot = &e->cat;
            else if (KEY(&k, "pid")) slot = &e->pid;
            else if (KEY(&k, "tid")) slot = &e->tid;
            else if (KEY(&k, "dur")) slot = &e->dur;
            break;
        case 4:
            if (KEY(&k, "name")) slot = &e->name;
            else if (KEY(&k, "args")) slot = &e->args;
            break;
        }
        if (slot && slot->kind != V_ABSENT) { ps->fail = 1; return; }
        if (slot == &e->args && ps->p < ps->end && *ps->p == '{') {
            const char *start = ps->p;
            parse_args(ps, &e->a);
            e->args.kind = V_OBJECT;
            e->args.p = start;
        } else {
            Val v;
            skip_value(ps, slot ? slot : &v, 1);
        }
    } while (next_member(ps, '}'));
}

#endif
