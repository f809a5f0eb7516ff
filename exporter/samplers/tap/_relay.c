/* The tap's response relay: the per-chunk path of a streamed answer, out of Python.
 *
 * Why: in bench_tap, at 128 streams of SSE, the tap's Python on the per-chunk path (the
 * upstream protocol's data_received, the exchange's upstream_data, llhttp's on_body callback
 * and the re-framing of each piece) cost about 5 us per chunk over a bare uvloop relay, and
 * kept the tap's CPU per chunk above 1.25x nginx's (issue 31).
 *
 * What: `Relay` is the base type of the tap's upstream connection
 * (exporter/samplers/tap/upstream.py). Its data_received records the read's time and, unless
 * relaying, calls the subclass's `_data` (the Python path: llhttp re-frames every piece). After
 * `relay_begin(write, rest)` it forwards a chunked response body as it came, verbatim, to the
 * client's `write`, reading only the framing: hex size, CRLF, data, CRLF, until the last chunk
 * `0` CRLF CRLF. It accepts a strict subset of what llhttp accepts (RFC 9112 section 7.1
 * without chunk extensions or trailers, at most 15 hex digits, CRLF only) and never decides
 * anything llhttp would decide differently:
 *
 *   - a size line or last chunk outside that subset (an extension, a trailer, whitespace, a
 *     bare LF, a long size) is not forwarded: the bytes from the start of that line on go to
 *     `_relay_fallback(rest)`, which hands them to llhttp, still at a chunk boundary;
 *   - a byte other than CRLF after a chunk's data (llhttp: an error) ends the relay with
 *     `_relay_broken()` after forwarding the data before it (the response is cut, as llhttp's
 *     path cuts it);
 *   - the end of the last chunk calls `_relay_end(extra)`, extra when bytes followed it in
 *     the same read (never forwarded: they belong to no response).
 *
 * A size line split across reads is held (at most HOLD bytes) until it is complete, so what
 * reached the client is always whole lines plus chunk data, and a fallback never follows a
 * half-forwarded line. The Python twin of this framing is llhttp itself: tests/tap/test_relay.py
 * feeds generated streams, split at every point, to both and compares what the client gets.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define MAX_DIGITS 15 /* 15 hex digits: sizes below 2**60, never an overflow */
#define HOLD 32       /* a held line: digits, CR LF, and for the last chunk CR */

enum state {
    S_SIZE0,   /* at a chunk boundary: the first hex digit */
    S_SIZE,    /* more hex digits, or CR */
    S_SIZE_LF, /* LF after the size */
    S_DATA,    /* `left` bytes of chunk data */
    S_DATA_CR, /* CR after the data */
    S_DATA_LF, /* LF after the data */
    S_LAST_CR, /* after `0` CRLF: the CR of the empty trailer section */
    S_LAST_LF, /* its LF: the end of the response */
};

typedef struct {
    PyObject_HEAD
    PyObject *write;   /* the client transport's write while relaying, else NULL */
    double last_read;  /* CLOCK_MONOTONIC seconds of the last read (time.monotonic's clock) */
    int relaying;
    int state;
    int digits;
    uint64_t left; /* the size being read, then the data still owed */
    Py_ssize_t held;
    char hold[HOLD];
} Relay;

static PyObject *str_data, *str_end, *str_fallback, *str_broken;

static double monotonic_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int in_line(int state) {
    return state == S_SIZE || state == S_SIZE_LF || state == S_LAST_CR || state == S_LAST_LF;
}

static void stop(Relay *self) {
    self->relaying = 0;
    Py_CLEAR(self->write);
    self->held = 0;
}

/* Write hold[0:held_out] + buf[0:n] to the client (nothing when both are empty). */
static int emit(PyObject *write, const char *hold, Py_ssize_t held_out, PyObject *data,
                const char *buf, Py_ssize_t len, Py_ssize_t n) {
    PyObject *out, *res;
    if (held_out == 0 && n == 0) return 0;
    if (held_out == 0 && n == len) {
        out = data;
        Py_INCREF(out);
    } else {
        out = PyBytes_FromStringAndSize(NULL, held_out + n);
        if (out == NULL) return -1;
        memcpy(PyBytes_AS_STRING(out), hold, (size_t)held_out);
        memcpy(PyBytes_AS_STRING(out) + held_out, buf, (size_t)n);
    }
    res = PyObject_CallOneArg(write, out);
    Py_DECREF(out);
    if (res == NULL) return -1;
    Py_DECREF(res);
    return 0;
}

/* The relay's last write: it stops relaying first (a callback that follows may start a new
 * exchange on this connection), then writes what is whole. */
static int emit_last(Relay *self, PyObject *write, const char *hold, Py_ssize_t prefix,
                     PyObject *data, const char *buf, Py_ssize_t len, Py_ssize_t n) {
    int rc;
    Py_INCREF(write);
    stop(self);
    self->state = S_SIZE0;
    rc = emit(write, hold, prefix, data, buf, len, n);
    Py_DECREF(write);
    return rc;
}

#define NO_LINE (-2)   /* no size line pending */
#define HELD_LINE (-1) /* the pending line began in an earlier read: its bytes are held */

/* Relay one read. Returns a new reference (None) or NULL with an exception set.
 *
 * `line` is where the pending size line (or last chunk) began: an offset in this read,
 * HELD_LINE, or NO_LINE. `prefix` is how many held bytes go out before this read's bytes: a
 * held line that ended in this read goes out whole, with what follows it. */
static PyObject *relay_read(Relay *self, PyObject *data) {
    const char *buf = PyBytes_AS_STRING(data);
    Py_ssize_t len = PyBytes_GET_SIZE(data);
    Py_ssize_t i = 0, line, prefix = 0, held_in = self->held;
    int state = self->state, digits = self->digits;
    uint64_t left = self->left;
    PyObject *write = self->write, *res, *rest;
    char hold[HOLD];

    line = in_line(state) ? HELD_LINE : NO_LINE;
    memcpy(hold, self->hold, (size_t)held_in);
    while (i < len) {
        unsigned char c = (unsigned char)buf[i];
        switch (state) {
        case S_DATA: {
            uint64_t avail = (uint64_t)(len - i);
            uint64_t take = left < avail ? left : avail;
            i += (Py_ssize_t)take;
            left -= take;
            if (left == 0) state = S_DATA_CR;
            continue;
        }
        case S_DATA_CR:
        case S_DATA_LF:
            if (c != (state == S_DATA_CR ? '\r' : '\n')) goto broken;
            state = state == S_DATA_CR ? S_DATA_LF : S_SIZE0;
            i++;
            continue;
        case S_SIZE0:
            line = i;
            if (hexval(c) < 0) goto fallback;
            left = (uint64_t)hexval(c);
            digits = 1;
            state = S_SIZE;
            i++;
            continue;
        case S_SIZE:
            if (c == '\r') {
                state = S_SIZE_LF;
            } else {
                int v = hexval(c);
                if (v < 0 || digits >= MAX_DIGITS) goto fallback;
                left = (left << 4) | (uint64_t)v;
                digits++;
            }
            i++;
            continue;
        case S_SIZE_LF:
            if (c != '\n') goto fallback;
            i++;
            if (left == 0) {
                state = S_LAST_CR; /* the last chunk: held until its empty trailer line */
            } else {
                state = S_DATA;
                if (line == HELD_LINE) prefix = held_in; /* the held line is whole now */
                line = NO_LINE;
            }
            continue;
        case S_LAST_CR:
            if (c != '\r') goto fallback; /* a trailer section: llhttp reads it */
            state = S_LAST_LF;
            i++;
            continue;
        case S_LAST_LF:
            if (c != '\n') goto fallback;
            i++;
            if (line == HELD_LINE) prefix = held_in;
            if (emit_last(self, write, hold, prefix, data, buf, len, i) < 0) return NULL;
            return PyObject_CallMethodOneArg(
                (PyObject *)self, str_end, i < len ? Py_True : Py_False);
        }
    }
    /* the read is used up: forward what is whole, hold an unfinished line */
    if (line == HELD_LINE) { /* all of this read continues the held line */
        if (held_in + len > HOLD) goto fallback; /* cannot happen within MAX_DIGITS */
        memcpy(self->hold + held_in, buf, (size_t)len);
        self->held = held_in + len;
    } else if (line >= 0) {
        if (len - line > HOLD) goto fallback;
        if (emit(write, hold, prefix, data, buf, len, line) < 0) return NULL;
        memcpy(self->hold, buf + line, (size_t)(len - line));
        self->held = len - line;
    } else {
        if (emit(write, hold, prefix, data, buf, len, len) < 0) return NULL;
        self->held = 0;
    }
    self->state = state;
    self->digits = digits;
    self->left = left;
    Py_RETURN_NONE;

broken:
    /* not CRLF after a chunk's data: llhttp refuses it; what came before goes out, then
       the response is cut */
    if (emit_last(self, write, hold, prefix, data, buf, len, i) < 0) return NULL;
    return PyObject_CallMethodNoArgs((PyObject *)self, str_broken);

fallback:
    /* a line outside the subset: what came before it goes out; the line and the rest go to
       llhttp, which is at a chunk boundary (it has read no chunk of this response) */
    if (emit_last(self, write, hold, prefix, data, buf, len, line == HELD_LINE ? 0 : line) < 0)
        return NULL;
    {
        Py_ssize_t keep = line == HELD_LINE ? held_in : 0;
        Py_ssize_t from = line == HELD_LINE ? 0 : line;
        rest = PyBytes_FromStringAndSize(NULL, keep + (len - from));
        if (rest == NULL) return NULL;
        memcpy(PyBytes_AS_STRING(rest), hold, (size_t)keep);
        memcpy(PyBytes_AS_STRING(rest) + keep, buf + from, (size_t)(len - from));
    }
    res = PyObject_CallMethodOneArg((PyObject *)self, str_fallback, rest);
    Py_DECREF(rest);
    return res;
}

static PyObject *Relay_data_received(Relay *self, PyObject *data) {
    self->last_read = monotonic_now();
    if (!self->relaying) return PyObject_CallMethodOneArg((PyObject *)self, str_data, data);
    if (!PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "data_received expects bytes");
        return NULL;
    }
    return relay_read(self, data);
}

static PyObject *Relay_relay_begin(Relay *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "relay_begin(write, rest)");
        return NULL;
    }
    if (!PyCallable_Check(args[0]) || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "relay_begin(write: callable, rest: bytes)");
        return NULL;
    }
    Py_INCREF(args[0]);
    Py_XSETREF(self->write, args[0]);
    self->relaying = 1;
    self->state = S_SIZE0;
    self->digits = 0;
    self->left = 0;
    self->held = 0;
    if (PyBytes_GET_SIZE(args[1]) == 0) Py_RETURN_NONE;
    return relay_read(self, args[1]);
}

static PyObject *Relay_relay_to(Relay *self, PyObject *write) {
    if (!self->relaying) {
        PyErr_SetString(PyExc_RuntimeError, "relay_to: not relaying");
        return NULL;
    }
    if (!PyCallable_Check(write)) {
        PyErr_SetString(PyExc_TypeError, "relay_to(write: callable)");
        return NULL;
    }
    Py_INCREF(write);
    Py_XSETREF(self->write, write);
    Py_RETURN_NONE;
}

static PyObject *Relay_relay_stop(Relay *self, PyObject *Py_UNUSED(ignored)) {
    stop(self);
    Py_RETURN_NONE;
}

static int Relay_init(Relay *self, PyObject *args, PyObject *kwds) {
    (void)args;
    (void)kwds;
    self->last_read = 0.0;
    return 0;
}

static int Relay_traverse(Relay *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->write);
    return 0;
}

static int Relay_clear(Relay *self) {
    Py_CLEAR(self->write);
    return 0;
}

static void Relay_dealloc(Relay *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Relay_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *Relay_get_relaying(Relay *self, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(self->relaying);
}

static PyMethodDef Relay_methods[] = {
    {"data_received", (PyCFunction)Relay_data_received, METH_O,
     "Record the read's time; relay it, or hand it to self._data (the Python path)."},
    {"relay_begin", (PyCFunction)(void (*)(void))Relay_relay_begin, METH_FASTCALL,
     "relay_begin(write, rest): relay the chunked body from here (a chunk boundary)."},
    {"relay_to", (PyCFunction)Relay_relay_to, METH_O,
     "relay_to(write): where the following reads go (the head's read went to a buffer)."},
    {"relay_stop", (PyCFunction)Relay_relay_stop, METH_NOARGS,
     "Stop relaying and drop the client's write (the exchange ended another way)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Relay_members[] = {
    {"last_read", T_DOUBLE, offsetof(Relay, last_read), 0,
     "time.monotonic() of the last read from SGLang"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Relay_getset[] = {
    {"relaying", (getter)Relay_get_relaying, NULL, "a chunked body is being relayed", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Relay_slots[] = {
    {Py_tp_doc, "The per-chunk path of a streamed answer (see the module's source)."},
    {Py_tp_init, Relay_init},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_dealloc, Relay_dealloc},
    {Py_tp_traverse, Relay_traverse},
    {Py_tp_clear, Relay_clear},
    {Py_tp_methods, Relay_methods},
    {Py_tp_members, Relay_members},
    {Py_tp_getset, Relay_getset},
    {0, NULL},
};

static PyType_Spec Relay_spec = {
    .name = "exporter.samplers.tap._relay.Relay",
    .basicsize = sizeof(Relay),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = Relay_slots,
};

static int relay_exec(PyObject *module) {
    PyObject *type = PyType_FromModuleAndSpec(module, &Relay_spec, NULL);
    if (type == NULL) return -1;
    if (PyModule_AddObject(module, "Relay", type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    if (PyModule_AddIntConstant(module, "MAX_DIGITS", MAX_DIGITS) < 0) return -1;
    return 0;
}

static PyModuleDef_Slot relay_module_slots[] = {
    {Py_mod_exec, relay_exec},
    {0, NULL},
};

static struct PyModuleDef relay_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "exporter.samplers.tap._relay",
    .m_doc = "The tap's chunked-response relay (see _relay.c).",
    .m_size = 0,
    .m_slots = relay_module_slots,
};

PyMODINIT_FUNC PyInit__relay(void) {
    str_data = PyUnicode_InternFromString("_data");
    str_end = PyUnicode_InternFromString("_relay_end");
    str_fallback = PyUnicode_InternFromString("_relay_fallback");
    str_broken = PyUnicode_InternFromString("_relay_broken");
    if (!str_data || !str_end || !str_fallback || !str_broken) return NULL;
    return PyModuleDef_Init(&relay_module);
}
