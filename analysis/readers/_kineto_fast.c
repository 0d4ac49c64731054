/* A piece of a Kineto trace's traceEvents (a JSON list) read straight into columns, in C.

   `columns(data)` gives what analysis.readers.kineto_columns.columns(decode(data)) gives, in raw form
   (kineto_columns.fast_piece turns it into a Piece), or None where the piece holds anything off the
   common path: an element that is not an object, a phase or a category written otherwise than as plain
   text, a time that is not a plain number, an integer argument that is not an integer, a duplicated key,
   an escaped key, invalid UTF-8 or JSON, nesting past 64, an integer of more than 640 digits anywhere, a
   name table that a look-up probes past 256 slots, ... The caller then reads the piece as before
   (msgspec and Python), so this module only ever agrees with that reader or steps aside: every rule here
   is one of kineto_columns' rules, written for the values it can decide alone. Where msgspec refuses a
   piece this module takes (a lone surrogate escaped in a key it skips), the stream's parser reads it,
   with the same columns (tests/test_kineto_corpus.py).

   The parse runs without the GIL; Python objects are made for each distinct name and text only. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_kineto_event.h"
#include "_kineto_json.h"
#include "_kineto_store.h"

#define MAX_NS ((int64_t)1 << 62)        /* kineto_columns.MAX_NS */
#define NGROUPS 8
#define OTHER NGROUPS

/* ---- the groups: kineto_columns.GROUPS and the columns each one holds --------------------------------- */

enum { G_RUNTIME, G_ANNOTATION, G_CPU_OPS, G_KERNELS, G_MEMCPY, G_MEMSET, G_SYNCS, G_GPU_ANNOTATION };
enum { C_START, C_END, C_INDEX, C_NAME, C_PID, C_TID, C_CORRELATION, C_EXTERNAL, C_SHAPES, C_DEVICE,
       C_STREAM, C_GRID, C_BLOCK, C_BYTES, NCOLS };
static const char *COLUMN_NAMES[NCOLS] = {"start", "end", "index", "name", "pid", "tid", "correlation",
    "external_id", "shapes", "device", "stream", "grid", "block", "bytes"};
/* each group's columns, in the order kineto_columns._group writes them; -1 ends */
static const int GROUP_COLUMNS[NGROUPS][10] = {
    {C_START, C_END, C_INDEX, C_NAME, C_PID, C_TID, C_CORRELATION, -1},
    {C_START, C_END, C_INDEX, C_NAME, C_PID, C_TID, -1},
    {C_START, C_END, C_INDEX, C_NAME, C_PID, C_TID, C_EXTERNAL, C_SHAPES, -1},
    {C_START, C_END, C_INDEX, C_NAME, C_DEVICE, C_STREAM, C_CORRELATION, C_GRID, C_BLOCK, -1},
    {C_START, C_END, C_INDEX, C_NAME, C_DEVICE, C_STREAM, C_CORRELATION, C_BYTES, -1},
    {C_START, C_END, C_INDEX, C_NAME, C_DEVICE, C_STREAM, C_CORRELATION, C_BYTES, -1},
    {C_START, C_END, C_INDEX, C_NAME, C_DEVICE, C_STREAM, C_CORRELATION, -1},
    {C_START, C_END, C_INDEX, C_NAME, C_DEVICE, C_STREAM, -1},
};

#define CAT(s, g) {s, sizeof(s) - 1, g}
static const struct { const char *cat; Py_ssize_t n; int group; } CATEGORIES[] = {
    CAT("kernel", G_KERNELS), CAT("gpu_memcpy", G_MEMCPY), CAT("gpu_memset", G_MEMSET),
    CAT("cuda_sync", G_SYNCS), CAT("cuda_runtime", G_RUNTIME), CAT("cuda_driver", G_RUNTIME),
    CAT("user_annotation", G_ANNOTATION), CAT("gpu_user_annotation", G_GPU_ANNOTATION),
    CAT("cpu_op", G_CPU_OPS), CAT("Kernel", G_KERNELS), CAT("Memcpy", G_MEMCPY), CAT("Memset", G_MEMSET),
    CAT("Runtime", G_RUNTIME), CAT("Operator", G_CPU_OPS),
};
static const char PHASES[] = "XMBEiICbneNOPDstfRcVv()"; /* kineto_events' phase structs */

typedef struct {
    Vec cols[NCOLS];
    Strings names, dims;
    Py_ssize_t n;
} Group;

typedef struct {
    char ph;
    const char *cat; /* NULL: no category (UNSET) */
    Py_ssize_t n;
    Py_ssize_t count;
} Ignored;

typedef struct {
    Val pid, tid, name;
} ThreadName;

typedef struct {
    Group groups[NGROUPS];
    Ignored *ignored;
    Py_ssize_t nignored, capignored;
    ThreadName *threads;
    Py_ssize_t nthreads, capthreads;
    Py_ssize_t count;
    int float_times;
} Out;

static void out_free(Out *o) {
    for (int g = 0; g < NGROUPS; g++) {
        for (int c = 0; c < NCOLS; c++) free(o->groups[g].cols[c].v);
        strings_free(&o->groups[g].names);
        strings_free(&o->groups[g].dims);
    }
    free(o->ignored);
    free(o->threads);
}

/* ---- values as kineto_columns reads them ------------------------------------------------------------ */

/* microseconds (an integer, or a float's text) as nanoseconds, exactly (kineto_columns.text_ns and
   _times); 0 where the value is not one the reader takes as it is */
static int time_ns(const Val *v, int64_t *out) {
    if (v->kind == V_INT) {
        int64_t us = v->i < 0 ? -v->i : v->i;
        if (us > MAX_NS / 1000) return 0;
        *out = v->i * 1000;
        return 1;
    }
    if (v->kind != V_FLOAT) return 0;
    const char *p = v->p, *end = v->p + v->n;
    int neg = 0;
    if (*p == '-') { neg = 1; p++; }
    int64_t whole = 0;
    int nwhole = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        if (++nwhole > 16) return 0;
        whole = whole * 10 + (*p++ - '0');
    }
    if (whole > MAX_NS / 1000) return 0;
    if (p >= end || *p != '.') return 0; /* an exponent */
    p++;
    int64_t frac = 0;
    int k = 0;
    for (; k < 3 && p < end; k++) {
        if (*p < '0' || *p > '9') return 0;
        frac = frac * 10 + (*p++ - '0');
    }
    for (; k < 3; k++) frac *= 10;
    int64_t ns = whole * 1000 + frac;
    if (p < end) { /* sub-nanosecond digits: rounded half to even */
        if (*p < '0' || *p > '9') return 0;
        char first = *p++;
        int rest = 0;
        for (; p < end; p++) {
            if (*p < '0' || *p > '9') return 0;
            if (*p != '0') rest = 1;
        }
        if (first > '5' || (first == '5' && (rest || (ns & 1)))) ns++;
    }
    if (ns > MAX_NS) return 0;
    *out = neg ? -ns : ns;
    return 1;
}

/* an integer argument (kineto_columns._ints): its value, NULLV where absent or null; 0 for anything else */
static int int_arg(const Val *v, int64_t *out) {
    if (v->kind == V_INT) { *out = v->i; return 1; }
    if (v->kind == V_ABSENT || v->kind == V_NULL) { *out = NULLV; return 1; }
    return 0;
}

static int category_group(const Val *cat) {
    for (size_t i = 0; i < sizeof(CATEGORIES) / sizeof(CATEGORIES[0]); i++)
        if (cat->n == CATEGORIES[i].n && memcmp(cat->p, CATEGORIES[i].cat, (size_t)cat->n) == 0)
            return CATEGORIES[i].group;
    return OTHER;
}

static int count_ignored(Out *o, char ph, const Val *cat) {
    const char *p = cat->kind == V_ABSENT ? NULL : cat->p;
    Py_ssize_t n = cat->kind == V_ABSENT ? 0 : cat->n;
    for (Py_ssize_t i = 0; i < o->nignored; i++) {
        Ignored *g = &o->ignored[i];
        if (g->ph == ph && (g->cat == NULL) == (p == NULL) && g->n == n && (!n || !memcmp(g->cat, p, (size_t)n))) {
            g->count++;
            return 0;
        }
    }
    if (o->nignored >= 256) return -1;
    Ignored *v = room_for_one(o->ignored, o->nignored, &o->capignored, sizeof(Ignored), 16);
    if (!v) return -1;
    o->ignored = v;
    o->ignored[o->nignored++] = (Ignored){ph, p, n, 1};
    return 0;
}

/* one event into its group's columns, or counted; -1: the piece is not for this reader */
static int take(Out *o, const Event *e, Py_ssize_t index) {
    if (e->ph.kind != V_STR || e->ph.esc || e->ph.n != 1 || !memchr(PHASES, e->ph.p[0], sizeof(PHASES) - 1))
        return -1;
    char ph = e->ph.p[0];
    int decoded_whole = ph == 'X' || ph == 'M'; /* phase structs with args: an object or null */
    if (decoded_whole && e->args.kind != V_ABSENT && e->args.kind != V_OBJECT && e->args.kind != V_NULL)
        return -1;
    const Args *a = &e->a;
    if (ph == 'M') {
        if (e->name.kind == V_STR && e->name.esc) return -1;
        /* a thread's name: text, or a number read as its text (kineto_columns.thread_name) */
        int named = a->f[A_NAME].kind == V_STR || a->f[A_NAME].kind == V_INT || a->f[A_NAME].kind == V_FLOAT;
        if (e->name.kind == V_STR && KEY(&e->name, "thread_name") && a->f[A_NAME].kind == V_BIGINT) return -1;
        if (e->name.kind == V_STR && KEY(&e->name, "thread_name") && named) {
            if ((e->pid.kind != V_INT && e->pid.kind != V_STR) || (e->tid.kind != V_INT && e->tid.kind != V_STR))
                return -1;
            ThreadName *v = room_for_one(o->threads, o->nthreads, &o->capthreads, sizeof(ThreadName), 16);
            if (!v) return -1;
            o->threads = v;
            o->threads[o->nthreads++] = (ThreadName){e->pid, e->tid, a->f[A_NAME]};
        }
        return 0;
    }
    if (e->cat.kind != V_ABSENT && (e->cat.kind != V_STR || e->cat.esc)) return -1;
    int g = ph == 'X' && e->cat.kind == V_STR ? category_group(&e->cat) : OTHER;
    if (g == OTHER) return count_ignored(o, ph, &e->cat);

    int64_t ts, dur;
    if (!time_ns(&e->ts, &ts) || !time_ns(&e->dur, &dur) || dur < 0) return -1;
    if (e->name.kind != V_STR) return -1;
    if (e->ts.kind == V_FLOAT) o->float_times = 1;
    Group *gr = &o->groups[g];
    int cpu = g == G_RUNTIME || g == G_ANNOTATION || g == G_CPU_OPS;
    int64_t col[NCOLS];
    col[C_START] = ts;
    col[C_END] = (int64_t)((uint64_t)ts + (uint64_t)dur);
    col[C_INDEX] = index;
    col[C_NAME] = strings_id(&gr->names, e->name.p, e->name.n, e->name.esc);
    if (col[C_NAME] < 0) return -1;
    if (cpu) {
        if (e->pid.kind != V_INT || e->tid.kind != V_INT) return -1;
        col[C_PID] = e->pid.i;
        col[C_TID] = e->tid.i;
    }
    if (g == G_RUNTIME) {
        if (!int_arg(&a->f[A_CORRELATION], &col[C_CORRELATION])) return -1;
    } else if (g == G_CPU_OPS) {
        if (!int_arg(&a->f[A_EXTERNAL], &col[C_EXTERNAL])) return -1;
        const Val *d = &a->f[A_INPUT_DIMS];
        col[C_SHAPES] = d->kind == V_ABSENT ? strings_id(&gr->dims, "null", 4, 0)
                        : d->kind == V_STR  ? -1 /* a string's raw text would need its quotes */
                                            : strings_id(&gr->dims, d->p, d->n, 0);
        if (col[C_SHAPES] < 0) return -1;
    } else if (g != G_ANNOTATION) {
        const Val *dv = &a->f[A_DEVICE];
        if (dv->kind == V_INT) col[C_DEVICE] = dv->i < 0 ? 0 : dv->i;
        else if (dv->kind == V_ABSENT && e->pid.kind == V_BIGINT) return -1;
        else if (dv->kind == V_ABSENT) col[C_DEVICE] = e->pid.kind == V_INT && e->pid.i >= 0 ? e->pid.i : 0;
        else if (dv->kind == V_BIGINT) return -1;
        else col[C_DEVICE] = 0;
        if (g == G_GPU_ANNOTATION && a->f[A_STREAM].kind == V_ABSENT) {
            if (!int_arg(&e->tid, &col[C_STREAM])) return -1;
        } else if (!int_arg(&a->f[A_STREAM], &col[C_STREAM])) {
            return -1;
        }
        if (g != G_GPU_ANNOTATION && !int_arg(&a->f[A_CORRELATION], &col[C_CORRELATION])) return -1;
        if (g == G_KERNELS) {
            col[C_GRID] = a->grid;
            col[C_BLOCK] = a->block;
        } else if (g == G_MEMCPY || g == G_MEMSET) {
            if (!int_arg(&a->f[A_BYTES], &col[C_BYTES])) return -1;
        }
    }
    for (const int *c = GROUP_COLUMNS[g]; *c >= 0; c++)
        if (vec_push(&gr->cols[*c], col[*c]) < 0) return -1;
    gr->n++;
    return 0;
}

/* the event at ps->p into `o`, and the whitespace after it: 0, or -1 where it is not one for this reader */
static int read_event(Parser *ps, Out *o) {
    if (ps->p >= ps->end || *ps->p != '{') return -1;
    Event e;
    parse_event(ps, &e);
    if (ps->fail || take(o, &e, o->count) < 0) return -1;
    o->count++;
    ws(ps);
    return 0;
}

/* the whole piece (a list, or with `body` the list's elements alone): 0, or -1 where it is not for this
   reader */
static int read_piece(Parser *ps, Out *o, int body) {
    ws(ps);
    if (body) {
        if (ps->p == ps->end) return 0;
    } else {
        if (ps->p >= ps->end || *ps->p != '[') return -1;
        if (!container_open(ps, ']')) {
            ws(ps);
            return ps->p == ps->end ? 0 : -1;
        }
    }
    for (;;) {
        if (read_event(ps, o) < 0) return -1;
        if (ps->p >= ps->end || *ps->p != ',') break;
        ps->p++;
        ws(ps);
    }
    if (!body) { /* the list's `]` */
        if (ps->p >= ps->end || *ps->p != ']') return -1;
        ps->p++;
        ws(ps);
    }
    return ps->p == ps->end ? 0 : -1;
}

/* ---- to Python -------------------------------------------------------------------------------------- */

/* a string's text (escapes decoded) as str; NULL where it holds a lone surrogate (the reader before
   keeps those as escapes: kineto_checks.clean_name) */
static PyObject *text(const char *p, Py_ssize_t n, int esc) {
    if (!esc) return PyUnicode_DecodeUTF8(p, n, "strict");
    char *buf = malloc((size_t)n + 1);
    if (!buf) return PyErr_NoMemory();
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n;) {
        if (p[i] != '\\') { buf[m++] = p[i++]; continue; }
        char e = p[i + 1];
        if (e != 'u') {
            buf[m++] = e == 'b' ? '\b' : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : e;
            i += 2;
            continue;
        }
        uint32_t cp = (uint32_t)(hexval(p[i + 2]) << 12 | hexval(p[i + 3]) << 8 | hexval(p[i + 4]) << 4 | hexval(p[i + 5]));
        i += 6;
        if (cp >= 0xD800 && cp < 0xDC00) {
            if (i + 6 > n || p[i] != '\\' || p[i + 1] != 'u') { free(buf); return NULL; }
            uint32_t lo = (uint32_t)(hexval(p[i + 2]) << 12 | hexval(p[i + 3]) << 8 | hexval(p[i + 4]) << 4 | hexval(p[i + 5]));
            if (lo < 0xDC00 || lo >= 0xE000) { free(buf); return NULL; }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            i += 6;
        } else if (cp >= 0xDC00 && cp < 0xE000) {
            free(buf);
            return NULL;
        }
        if (cp < 0x80) buf[m++] = (char)cp;
        else if (cp < 0x800) { buf[m++] = (char)(0xC0 | cp >> 6); buf[m++] = (char)(0x80 | (cp & 0x3F)); }
        else if (cp < 0x10000) {
            buf[m++] = (char)(0xE0 | cp >> 12); buf[m++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            buf[m++] = (char)(0x80 | (cp & 0x3F));
        } else {
            buf[m++] = (char)(0xF0 | cp >> 18); buf[m++] = (char)(0x80 | ((cp >> 12) & 0x3F));
            buf[m++] = (char)(0x80 | ((cp >> 6) & 0x3F)); buf[m++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    PyObject *s = PyUnicode_DecodeUTF8(buf, m, "strict");
    free(buf);
    return s;
}

/* an integer as int; a string's text, or a float's as written (as msgspec's float_hook=str gives it) */
static PyObject *scalar(const Val *v) {
    return v->kind == V_INT ? PyLong_FromLongLong(v->i) : text(v->p, v->n, v->esc);
}

/* a list of `n` items, item i a new reference from `item(of, i)`; NULL where one cannot be made */
static PyObject *list_of(Py_ssize_t n, PyObject *(*item)(const void *of, Py_ssize_t i), const void *of) {
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = item(of, i);
        if (!x) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, x);
    }
    return list;
}

static PyObject *name_item(const void *of, Py_ssize_t i) {
    const Strings *s = of;
    return text(s->p[i], s->n[i], s->esc[i]);
}

static PyObject *dims_item(const void *of, Py_ssize_t i) {
    const Strings *s = of;
    return PyBytes_FromStringAndSize(s->p[i], s->n[i]);
}

static PyObject *group_object(const Group *g, int gi) {
    PyObject *names = list_of(g->names.count, name_item, &g->names), *dims = NULL, *cols = NULL;
    if (!names) return NULL;
    dims = gi == G_CPU_OPS ? list_of(g->dims.count, dims_item, &g->dims) : Py_NewRef(Py_None);
    if (!dims) goto fail;
    cols = PyDict_New();
    if (!cols) goto fail;
    for (const int *c = GROUP_COLUMNS[gi]; *c >= 0; c++) {
        PyObject *b = PyByteArray_FromStringAndSize((const char *)g->cols[*c].v, g->n * (Py_ssize_t)sizeof(int64_t));
        if (!b || PyDict_SetItemString(cols, COLUMN_NAMES[*c], b) < 0) { Py_XDECREF(b); goto fail; }
        Py_DECREF(b);
    }
    return Py_BuildValue("(NNN)", names, dims, cols);
fail:
    Py_XDECREF(names);
    Py_XDECREF(dims);
    Py_XDECREF(cols);
    return NULL;
}

static PyObject *group_item(const void *of, Py_ssize_t i) {
    const Group *g = &((const Out *)of)->groups[i];
    return g->n ? group_object(g, (int)i) : Py_NewRef(Py_None);
}

static PyObject *ignored_item(const void *of, Py_ssize_t i) {
    const Ignored *g = &((const Out *)of)->ignored[i];
    PyObject *cat = g->cat ? PyUnicode_DecodeUTF8(g->cat, g->n, "strict") : Py_NewRef(Py_None);
    return cat ? Py_BuildValue("(s#Nn)", &g->ph, (Py_ssize_t)1, cat, g->count) : NULL;
}

static PyObject *thread_item(const void *of, Py_ssize_t i) {
    const ThreadName *t = &((const Out *)of)->threads[i];
    PyObject *pid = scalar(&t->pid), *tid = pid ? scalar(&t->tid) : NULL;
    PyObject *name = tid ? scalar(&t->name) : NULL; /* an integer as int: thread_name writes it */
    if (!name) { Py_XDECREF(pid); Py_XDECREF(tid); return NULL; }
    return Py_BuildValue("(NNN)", pid, tid, name);
}

static PyObject *result(Out *o) {
    PyObject *groups = list_of(NGROUPS, group_item, o), *ignored = NULL, *threads = NULL;
    if (!groups) return NULL;
    ignored = list_of(o->nignored, ignored_item, o);
    if (!ignored) goto fail;
    threads = list_of(o->nthreads, thread_item, o);
    if (!threads) goto fail;
    return Py_BuildValue("(nNNNO)", o->count, groups, ignored, threads, o->float_times ? Py_True : Py_False);
fail:
    Py_XDECREF(groups);
    Py_XDECREF(ignored);
    Py_XDECREF(threads);
    return NULL;
}

static PyObject *columns(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    int body = 0;
    if (!PyArg_ParseTuple(args, "y*|p", &view, &body)) return NULL;
    Out *o = calloc(1, sizeof(Out));
    if (!o) { PyBuffer_Release(&view); return PyErr_NoMemory(); }
    Parser ps = {(const char *)view.buf, (const char *)view.buf + view.len, 0};
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = read_piece(&ps, o, body);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL;
    if (status == 0) {
        out = result(o);
        if (!out && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) PyErr_Clear();
    }
    if (!out && !PyErr_Occurred()) out = Py_NewRef(Py_None);
    out_free(o);
    free(o);
    PyBuffer_Release(&view);
    return out;
}

static PyObject *text_hash(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    uint64_t h = hash((const char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(h);
}

static PyMethodDef METHODS[] = {
    {"columns", columns, METH_VARARGS,
     "columns(data, body=False) -> (count, groups, ignored, thread_names, float_times), or None where the "
     "piece is not on the common path (read it with kineto_columns' reader). `data`: a JSON list of events, "
     "or with `body` its elements alone."},
    {"text_hash", text_hash, METH_VARARGS,
     "text_hash(data) -> int: the hash of the table of distinct names (for tests: how names spread)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_kineto_fast", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kineto_fast(void) { return PyModule_Create(&MODULE); }

