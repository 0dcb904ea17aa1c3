/* Compiled decoder of binlog row images: the same layouts and values as the generated Python
 * decoders of rowcodec.py (which stay the fallback when this module is not built).
 *
 * A Layout is built once per table version from one spec per column,
 * (name, kind, width, a, b, convert):
 *   INT       little-endian integer of `width` bytes (1, 2, 3, 4, 8), signed when `a`
 *   DOUBLE    8-byte IEEE double
 *   FLOAT     4-byte IEEE float, passed through convert(value)
 *   FIXED     `width` bytes read by convert(data, pos)
 *   UTF8      a value of `width` length-prefix bytes, decoded as strict UTF-8
 *   PREFIXED  a value of `width` length-prefix bytes, passed as bytes to convert(raw)
 *   TIMESTAMP MySQL's TIMESTAMP2 with `a` fractional digits, as binformats.timestamp2 formats it
 *   DATETIME  DATETIME2 with `a` fractional digits, as binformats.datetime2 formats it
 *   DECIMAL   DECIMAL(a, b), as binformats.decimal formats it; bytes that hold no valid
 *             decimal (a digit group over its range) go to convert(raw), the Python reader,
 *             so both decoders give the same text for any bytes
 * Layout.decode(data, pos, end) returns every row image in data[pos:end] as a dict (column
 * order kept; NULL columns None). A row image that runs past `end` raises ValueError: the
 * event is damaged or its table map does not describe it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030B0000 /* public from 3.11 */
#define PyFloat_Unpack4 _PyFloat_Unpack4
#define PyFloat_Unpack8 _PyFloat_Unpack8
#endif

enum { K_INT = 1, K_DOUBLE = 2, K_FLOAT = 3, K_FIXED = 4, K_UNUSED = 5, K_UTF8 = 6,
       K_PREFIXED = 7, K_TIMESTAMP = 8, K_DATETIME = 9, K_DECIMAL = 10 };
static const int FRACTION_BYTES[7] = {0, 1, 1, 2, 2, 3, 3};
static const int DECIMAL_BYTES[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};

static int decimal_size(int precision, int scale);

typedef struct {
    int kind;
    int width;
    int a, b;        /* INT: signed; temporal: fractional digits; DECIMAL: precision, scale */
    PyObject *name;
    PyObject *convert; /* NULL when the kind takes none */
    struct Slot *slots; /* TIMESTAMP, DATETIME, DECIMAL: the values formatted last */
} Col;

/* A direct-mapped memory of formatted values: an update's two images, and rows written
 * together, mostly carry the same temporal and DECIMAL values. */
#define SLOTS 64
typedef struct Slot {
    unsigned char raw[32]; /* a DECIMAL(65, 30) takes 30 bytes, DATETIME(6) 8 */
    PyObject *value;
} Slot;

static Slot *remembered(Slot *slots, const unsigned char *p, int width) {
    uint32_t hash = 2166136261u;
    for (int i = 0; i < width; i++)
        hash = (hash ^ p[i]) * 16777619u;
    return &slots[(hash ^ hash >> 16) & (SLOTS - 1)];
}

typedef struct {
    PyObject_HEAD
    Py_ssize_t count;
    Py_ssize_t bitmap_size;
    Col *cols;
} Layout;

static void Layout_dealloc(Layout *self) {
    for (Py_ssize_t i = 0; self->cols && i < self->count; i++) {
        Py_XDECREF(self->cols[i].name);
        Py_XDECREF(self->cols[i].convert);
        for (int k = 0; self->cols[i].slots && k < SLOTS; k++)
            Py_XDECREF(self->cols[i].slots[k].value);
        PyMem_Free(self->cols[i].slots);
    }
    PyMem_Free(self->cols);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int parse_col(PyObject *spec, Col *col) {
    PyObject *name, *convert;
    if (!PyArg_ParseTuple(spec, "UiiiiO", &name, &col->kind, &col->width, &col->a, &col->b,
                          &convert))
        return -1;
    if (col->kind < K_INT || col->kind > K_DECIMAL || col->kind == K_UNUSED) {
        PyErr_Format(PyExc_ValueError, "unknown column kind %d", col->kind);
        return -1;
    }
    int takes_convert = col->kind == K_FLOAT || col->kind == K_FIXED
                        || col->kind == K_PREFIXED || col->kind == K_DECIMAL;
    if (takes_convert && !PyCallable_Check(convert)) {
        PyErr_SetString(PyExc_TypeError, "this column kind needs a callable converter");
        return -1;
    }
    int prefixed = col->kind == K_UTF8 || col->kind == K_PREFIXED;
    if ((prefixed && (col->width < 1 || col->width > 4))
        || (col->kind == K_INT && col->width != 1 && col->width != 2 && col->width != 3
            && col->width != 4 && col->width != 8)
        || (col->kind == K_FIXED && col->width < 1)
        || ((col->kind == K_TIMESTAMP || col->kind == K_DATETIME) && (col->a < 0 || col->a > 6
            || col->width != (col->kind == K_TIMESTAMP ? 4 : 5) + FRACTION_BYTES[col->a]))
        || (col->kind == K_DECIMAL && (col->a < 1 || col->a > 65 || col->b < 0
            || col->b > col->a || col->width != decimal_size(col->a, col->b)))) {
        PyErr_Format(PyExc_ValueError, "bad width %d for column kind %d", col->width,
                     col->kind);
        return -1;
    }
    Py_INCREF(name);
    col->name = name;
    PyUnicode_InternInPlace(&col->name);
    if (takes_convert) {
        Py_INCREF(convert);
        col->convert = convert;
    }
    if (col->kind >= K_TIMESTAMP && !(col->slots = PyMem_Calloc(SLOTS, sizeof(Slot)))) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static PyObject *Layout_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *specs;
    if (!PyArg_ParseTuple(args, "O!", &PyTuple_Type, &specs))
        return NULL;
    Layout *self = (Layout *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(specs);
    self->cols = PyMem_Calloc(count ? count : 1, sizeof(Col));
    if (!self->cols) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->count = count;
    self->bitmap_size = (count + 7) / 8;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (parse_col(PyTuple_GET_ITEM(specs, i), &self->cols[i]) < 0) {
            Py_DECREF(self);
            return NULL;
        }
    }
    return (PyObject *)self;
}

static PyObject *truncated(Py_ssize_t pos) {
    PyErr_Format(PyExc_ValueError, "row image runs past the end of its event at byte %zd",
                 pos);
    return NULL;
}

static uint64_t little(const unsigned char *p, int width) {
    uint64_t value = 0;
    for (int b = 0; b < width; b++)
        value |= (uint64_t)p[b] << (8 * b);
    return value;
}

static PyObject *read_int(const unsigned char *p, int width, int is_signed) {
    uint64_t value = little(p, width);
    if (!is_signed)
        return PyLong_FromUnsignedLongLong(value);
    if (width < 8) {
        uint64_t sign = (uint64_t)1 << (8 * width - 1);
        value = (value ^ sign) - sign; /* sign-extend */
    }
    return PyLong_FromLongLong((long long)value);
}

static PyObject *call1(PyObject *fn, PyObject *arg) {
    PyObject *args[1] = {arg};
    return PyObject_Vectorcall(fn, args, 1, NULL);
}

static PyObject *read_prefixed(Col *col, const unsigned char *buf, Py_ssize_t *pos,
                               Py_ssize_t end) {
    if (*pos + col->width > end)
        return truncated(*pos);
    Py_ssize_t size = (Py_ssize_t)little(buf + *pos, col->width);
    *pos += col->width;
    if (size > end - *pos)
        return truncated(*pos);
    const char *start = (const char *)buf + *pos;
    *pos += size;
    if (col->kind == K_UTF8)
        return PyUnicode_DecodeUTF8(start, size, "strict");
    PyObject *raw = PyBytes_FromStringAndSize(start, size);
    if (!raw)
        return NULL;
    PyObject *value = call1(col->convert, raw);
    Py_DECREF(raw);
    return value;
}


#include "_rowformat.h"

static PyObject *read_formatted(Col *col, const unsigned char *p) {
    Slot *slot = remembered(col->slots, p, col->width);
    if (slot->value && memcmp(slot->raw, p, col->width) == 0) {
        Py_INCREF(slot->value);
        return slot->value;
    }
    PyObject *value = col->kind == K_TIMESTAMP ? read_timestamp(p, col->a)
                      : col->kind == K_DATETIME ? read_datetime(p, col->a)
                                                : read_decimal(col, p);
    if (value) {
        Py_INCREF(value);
        Py_XSETREF(slot->value, value);
        memcpy(slot->raw, p, col->width);
    }
    return value;
}

static PyObject *read_fixed(Col *col, PyObject *data, const unsigned char *p, Py_ssize_t pos) {
    PyObject *value, *at;
    switch (col->kind) {
    case K_INT:
        return read_int(p, col->width, col->a);
    case K_DOUBLE:
        return PyFloat_FromDouble(PyFloat_Unpack8((const char *)p, 1));
    case K_FLOAT:
        if (!(value = PyFloat_FromDouble(PyFloat_Unpack4((const char *)p, 1))))
            return NULL;
        at = call1(col->convert, value);
        Py_DECREF(value);
        return at;
    case K_TIMESTAMP:
    case K_DATETIME:
    case K_DECIMAL:
        return read_formatted(col, p);
    default: /* K_FIXED */
        if (!(at = PyLong_FromSsize_t(pos)))
            return NULL;
        PyObject *args[2] = {data, at};
        value = PyObject_Vectorcall(col->convert, args, 2, NULL);
        Py_DECREF(at);
        return value;
    }
}

static int fixed_width(Col *col) {
    switch (col->kind) {
    case K_DOUBLE: return 8;
    case K_FLOAT: return 4;
    default: return col->width;
    }
}

static PyObject *read_value(Col *col, PyObject *data, const unsigned char *buf,
                            Py_ssize_t *pos, Py_ssize_t end) {
    if (col->kind == K_UTF8 || col->kind == K_PREFIXED)
        return read_prefixed(col, buf, pos, end);
    int width = fixed_width(col);
    if (*pos + width > end)
        return truncated(*pos);
    PyObject *value = read_fixed(col, data, buf + *pos, *pos);
    *pos += width;
    return value;
}

static PyObject *read_image(Layout *self, PyObject *data, const unsigned char *buf,
                            Py_ssize_t *pos, Py_ssize_t end) {
    if (*pos + self->bitmap_size > end)
        return truncated(*pos);
    const unsigned char *nulls = buf + *pos;
    *pos += self->bitmap_size;
    PyObject *row = PyDict_New();
    if (!row)
        return NULL;
    for (Py_ssize_t i = 0; i < self->count; i++) {
        Col *col = &self->cols[i];
        PyObject *value;
        if (nulls[i >> 3] >> (i & 7) & 1) {
            value = Py_None;
            Py_INCREF(value);
        } else if (!(value = read_value(col, data, buf, pos, end))) {
            Py_DECREF(row);
            return NULL;
        }
        int failed = PyDict_SetItem(row, col->name, value);
        Py_DECREF(value);
        if (failed) {
            Py_DECREF(row);
            return NULL;
        }
    }
    return row;
}

static PyObject *Layout_decode(Layout *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "decode(data: bytes, pos: int, end: int)");
        return NULL;
    }
    PyObject *data = args[0];
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]), end = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred())
        return NULL;
    if (pos < 0 || end > PyBytes_GET_SIZE(data) || pos > end) {
        PyErr_SetString(PyExc_ValueError, "pos and end must lie within data, pos <= end");
        return NULL;
    }
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(data);
    PyObject *out = PyList_New(0);
    while (out && pos < end) {
        PyObject *row = read_image(self, data, buf, &pos, end);
        if (!row || PyList_Append(out, row) < 0)
            Py_CLEAR(out);
        Py_XDECREF(row);
    }
    return out;
}

static PyMethodDef Layout_methods[] = {
    {"decode", (PyCFunction)(void (*)(void))Layout_decode, METH_FASTCALL,
     "decode(data, pos, end) -> list of row image dicts"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LayoutType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "dblog.connectors.mysql._rowimage.Layout",
    .tp_basicsize = sizeof(Layout),
    .tp_dealloc = (destructor)Layout_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The row image layout of one table version (see the module source).",
    .tp_methods = Layout_methods,
    .tp_new = Layout_new,
};

static struct PyModuleDef rowimage_module = {
    PyModuleDef_HEAD_INIT, "_rowimage", "Compiled binlog row image decoder.", -1, NULL,
};

PyMODINIT_FUNC PyInit__rowimage(void) {
    if (PyType_Ready(&LayoutType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&rowimage_module);
    if (!module)
        return NULL;
    Py_INCREF(&LayoutType);
    if (PyModule_AddObject(module, "Layout", (PyObject *)&LayoutType) < 0) {
        Py_DECREF(&LayoutType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
