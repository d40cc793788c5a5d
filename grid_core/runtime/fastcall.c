/* The lean call paths of the runtime in C: validate the arrays (numpy through the buffer
 * protocol; PyTorch and CuPy through their attributes), pack the C ABI's argument words and
 * call the packed entry with the GIL released.  Built on first use by grid_core.runtime.fastcall
 * (cached by content); without a C compiler or Python's headers the same path runs in Python.
 *
 * host(entry, template, nwords, n_index, itemsize, format, n, outs, out_shapes, ins, in_shapes,
 *      required) -> int | None
 *   entry       address of int grid_abi_<alg>_<f32|f64>_host_packed(const uint64_t *)
 *   template    address of the plan's nwords prefilled words (params, launch settings)
 *   outs, ins   tuples of arrays (ins may be shorter than in_shapes; None = not given)
 *   n           the batch size: every array is (n, *shape); -1: one state, every array
 *               (*shape), without the batch axis (the entry is called with a batch of one)
 *   *_shapes    tuples of per-state shapes
 *   required    tuple of bools, one per state input
 * Returns the entry's return code, or None when an array does not fit (wrong type, dtype,
 * shape, layout, or read-only output): the caller then takes its checked path.
 *
 * device(entry, template, nwords, n_index, protocol, type, dtype, device, stream, n, outs,
 *        out_shapes, ins, in_shapes, required[, made]) -> int | None
 *   The same for arrays read by attribute, calling the packed device entry (asynchronous on
 *   `stream`) or, with `stream` None, the packed entry as its template has it (PyTorch tensors
 *   in host memory, `device` -1, through the host entry): every array must be exactly of `type`,
 *   of `dtype`, on `device`, C-contiguous, (n, *shape) (n -1: (*shape)).  With `made` true the
 *   outputs were just made by the caller so (not a user's out=): only their addresses are read.
 *   protocol 0 (PyTorch): x.dtype is dtype, x.get_device(), x.is_contiguous(), x.data_ptr(), and
 *   not x.requires_grad (a tensor that does: the checked path, which differentiates the call);
 *   protocol 1 (CuPy): x.dtype == dtype, x.device.id, x.flags.c_contiguous, x.data.ptr.
 *
 * values(ins, in_shapes, configuration, nq, quaternions, lo, hi) -> int | None
 *   The checks a host entry makes of its inputs, for arrays no library reads first (JAX arrays
 *   in host memory), read through the buffer protocol (float32 or float64, C-contiguous, of
 *   shape (*shape) or (N, *shape); None: omitted): GRID_ABI_NONFINITE_INPUT - k for the first
 *   array k holding a NaN or an inf, else GRID_ABI_BAD_QUATERNION where ins[configuration] (-1:
 *   none) holds, in a row of nq values, a quaternion at one of the offsets `quaternions` of
 *   squared norm outside [lo, hi]; else 0.  None when an array cannot be read so.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_WORDS 64
#define MAX_ARRAYS 32

typedef int (*packed_entry)(const uint64_t *);

/* One array as (n, *shape) of the given item format, C-contiguous (n -1: as (*shape)); 1 on
 * success (view held). */
static int take(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t n, PyObject *shape, Py_ssize_t itemsize,
                char format) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (!PyObject_CheckBuffer(obj) || PyObject_GetBuffer(obj, view, flags) != 0) {
        PyErr_Clear();
        return 0;
    }
    Py_ssize_t dims = PyTuple_GET_SIZE(shape), batch = n < 0 ? 0 : 1;
    int ok = view->itemsize == itemsize && view->format != NULL && view->format[0] == format &&
             view->format[1] == '\0' && view->ndim == dims + batch && (n < 0 || view->shape[0] == n) &&
             view->len > 0;
    for (Py_ssize_t k = 0; ok && k < dims; ++k) {
        ok = view->shape[k + batch] == PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, k));
    }
    if (!ok) {
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

/* What host() and device() share: the plan's head (entry, template, nwords, n_index) in
 * args[0..3], its tail (n, outs, out_shapes, ins, in_shapes, required) from args[tail], and the
 * argument words, which start as the template. */
typedef struct {
    packed_entry entry;
    Py_ssize_t n_index, n, n_out, n_state, n_given;
    PyObject *outs, *out_shapes, *ins, *in_shapes, *required;
    uint64_t words[MAX_WORDS];
} Call;

/* Reads and checks the shared arguments; `reach` is how many words past n_index the entry
 * reads.  0 with an exception set when they are malformed. */
static int parse_call(const char *name, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t expected,
                      Py_ssize_t tail, Py_ssize_t reach, Call *c) {
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments", name, expected);
        return 0;
    }
    c->entry = (packed_entry)PyLong_AsVoidPtr(args[0]);
    const uint64_t *template_words = (const uint64_t *)PyLong_AsVoidPtr(args[1]);
    Py_ssize_t nwords = PyLong_AsSsize_t(args[2]);
    c->n_index = PyLong_AsSsize_t(args[3]);
    c->n = PyLong_AsSsize_t(args[tail]);
    c->outs = args[tail + 1];
    c->out_shapes = args[tail + 2];
    c->ins = args[tail + 3];
    c->in_shapes = args[tail + 4];
    c->required = args[tail + 5];
    if (PyErr_Occurred()) return 0;
    if (!PyTuple_Check(c->outs) || !PyTuple_Check(c->out_shapes) || !PyTuple_Check(c->ins) ||
        !PyTuple_Check(c->in_shapes) || !PyTuple_Check(c->required)) {
        PyErr_Format(PyExc_TypeError, "%s(): malformed plan", name);
        return 0;
    }
    c->n_out = PyTuple_GET_SIZE(c->outs);
    c->n_state = PyTuple_GET_SIZE(c->in_shapes);
    c->n_given = PyTuple_GET_SIZE(c->ins);
    if (nwords > MAX_WORDS || c->n_out + c->n_state > MAX_ARRAYS || c->n_out != PyTuple_GET_SIZE(c->out_shapes) ||
        c->n_given > c->n_state || c->n_given < 1 || c->n_index + reach >= nwords ||
        c->n_out + c->n_state > c->n_index) {
        PyErr_Format(PyExc_ValueError, "%s(): plan out of range", name);
        return 0;
    }
    memcpy(c->words, template_words, (size_t)nwords * sizeof(uint64_t));
    return 1;
}

/* State input i as given, or NULL where it is omitted (None, or past the arguments given):
 * its word is then 0, and the call fits only if the input is optional. */
static PyObject *input_at(Call *c, Py_ssize_t i, int *fits) {
    PyObject *x = i < c->n_given ? PyTuple_GET_ITEM(c->ins, i) : Py_None;
    if (x != Py_None) return x;
    *fits = !PyObject_IsTrue(PyTuple_GET_ITEM(c->required, i));
    c->words[c->n_out + i] = 0;
    return NULL;
}

/* Calls the entry with the batch size in its word (one state: 1), the GIL released. */
static int call_entry(Call *c) {
    int err;
    c->words[c->n_index] = (uint64_t)(c->n < 0 ? 1 : c->n);
    Py_BEGIN_ALLOW_THREADS
    err = c->entry(c->words);
    Py_END_ALLOW_THREADS
    return err;
}

static PyObject *host(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    Call c;
    if (!parse_call("host", args, nargs, 12, 6, 0, &c)) return NULL;
    Py_ssize_t itemsize = PyLong_AsSsize_t(args[4]);
    PyObject *format = args[5];
    if (PyErr_Occurred()) return NULL;
    if (!PyUnicode_Check(format) || PyUnicode_GET_LENGTH(format) != 1) {
        PyErr_SetString(PyExc_TypeError, "host(): malformed plan");
        return NULL;
    }
    char fmt = (char)PyUnicode_READ_CHAR(format, 0);
    Py_buffer views[MAX_ARRAYS];
    Py_ssize_t held = 0;
    int fits = c.n > 0 || c.n == -1;
    for (Py_ssize_t i = 0; fits && i < c.n_state; ++i) {
        PyObject *x = input_at(&c, i, &fits);
        if (x == NULL) continue;
        fits = take(x, &views[held], 0, c.n, PyTuple_GET_ITEM(c.in_shapes, i), itemsize, fmt);
        if (fits) c.words[c.n_out + i] = (uint64_t)(uintptr_t)views[held++].buf;
    }
    for (Py_ssize_t j = 0; fits && j < c.n_out; ++j) {
        fits = take(PyTuple_GET_ITEM(c.outs, j), &views[held], 1, c.n, PyTuple_GET_ITEM(c.out_shapes, j), itemsize,
                    fmt);
        if (fits) c.words[j] = (uint64_t)(uintptr_t)views[held++].buf;
    }
    int err = fits ? call_entry(&c) : 0;
    for (Py_ssize_t k = 0; k < held; ++k) PyBuffer_Release(&views[k]);
    if (!fits) Py_RETURN_NONE;
    return PyLong_FromLong(err);
}

enum { PROTOCOL_TORCH = 0, PROTOCOL_CUPY = 1 };

static PyObject *s_dtype, *s_shape, *s_get_device, *s_is_contiguous, *s_data_ptr, *s_flags, *s_c_contiguous, *s_device,
    *s_id, *s_data, *s_ptr, *s_requires_grad;

/* shp (a tuple, or a subclass such as torch.Size) equals (n, *shape) (n -1: shape). */
static int same_shape(PyObject *shp, Py_ssize_t n, PyObject *shape) {
    Py_ssize_t dims = PyTuple_GET_SIZE(shape), batch = n < 0 ? 0 : 1;
    if (!PyTuple_Check(shp) || PyTuple_GET_SIZE(shp) != dims + batch ||
        (batch && PyLong_AsSsize_t(PyTuple_GET_ITEM(shp, 0)) != n))
        return 0;
    for (Py_ssize_t k = 0; k < dims; ++k)
        if (PyLong_AsSsize_t(PyTuple_GET_ITEM(shp, k + batch)) != PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, k)))
            return 0;
    return 1;
}

/* x's attribute `name`, then that object's attribute `inner` (a new reference, or NULL). */
static PyObject *attr2(PyObject *x, PyObject *name, PyObject *inner) {
    PyObject *a = PyObject_GetAttr(x, name);
    if (a == NULL) return NULL;
    PyObject *b = PyObject_GetAttr(a, inner);
    Py_DECREF(a);
    return b;
}

/* The address of one CUDA array that fits (see device() above), or 0 (errors cleared). */
static uintptr_t device_address(PyObject *x, int protocol, PyObject *type, PyObject *dtype, long device,
                                Py_ssize_t n, PyObject *shape) {
    if ((PyObject *)Py_TYPE(x) != type) return 0;
    uintptr_t address = 0;
    PyObject *dt = NULL, *shp = NULL, *dev = NULL, *contiguous = NULL, *ptr = NULL;
    dt = PyObject_GetAttr(x, s_dtype);
    if (dt == NULL || (protocol == PROTOCOL_TORCH ? dt != dtype : PyObject_RichCompareBool(dt, dtype, Py_EQ) != 1))
        goto done;
    shp = PyObject_GetAttr(x, s_shape);
    if (shp == NULL || !same_shape(shp, n, shape)) goto done;
    if (protocol == PROTOCOL_TORCH) {
        PyObject *grad = PyObject_GetAttr(x, s_requires_grad);
        Py_XDECREF(grad);
        if (grad != Py_False) goto done;
        dev = PyObject_CallMethodNoArgs(x, s_get_device);
        contiguous = dev != NULL ? PyObject_CallMethodNoArgs(x, s_is_contiguous) : NULL;
    } else {
        dev = attr2(x, s_device, s_id);
        contiguous = dev != NULL ? attr2(x, s_flags, s_c_contiguous) : NULL;
    }
    if (contiguous != Py_True || PyLong_AsLong(dev) != device) goto done;
    ptr = protocol == PROTOCOL_TORCH ? PyObject_CallMethodNoArgs(x, s_data_ptr) : attr2(x, s_data, s_ptr);
    if (ptr != NULL && PyLong_Check(ptr)) address = (uintptr_t)PyLong_AsUnsignedLongLong(ptr);
done:
    Py_XDECREF(dt);
    Py_XDECREF(shp);
    Py_XDECREF(dev);
    Py_XDECREF(contiguous);
    Py_XDECREF(ptr);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        address = 0;
    }
    return address;
}

/* The address of an array the caller made of the right kind (device()'s `made`), or 0. */
static uintptr_t made_address(PyObject *x, int protocol) {
    PyObject *ptr = protocol == PROTOCOL_TORCH ? PyObject_CallMethodNoArgs(x, s_data_ptr) : attr2(x, s_data, s_ptr);
    uintptr_t address = ptr != NULL && PyLong_Check(ptr) ? (uintptr_t)PyLong_AsUnsignedLongLong(ptr) : 0;
    Py_XDECREF(ptr);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        address = 0;
    }
    return address;
}

static PyObject *device(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    Call c;
    Py_ssize_t has_made = nargs == 16;
    if (!parse_call("device", args, nargs - has_made, 15, 9, 5, &c)) return NULL;
    int made = has_made && PyObject_IsTrue(args[15]) == 1;
    long protocol = PyLong_AsLong(args[4]);
    PyObject *type = args[5], *dtype = args[6];
    long dev = PyLong_AsLong(args[7]);
    int has_stream = args[8] != Py_None;
    uint64_t stream = has_stream ? (uint64_t)PyLong_AsUnsignedLongLong(args[8]) : 0;
    if (PyErr_Occurred()) return NULL;
    if (!PyType_Check(type) || (protocol != PROTOCOL_TORCH && protocol != PROTOCOL_CUPY)) {
        PyErr_SetString(PyExc_TypeError, "device(): malformed plan");
        return NULL;
    }
    int fits = c.n > 0 || c.n == -1;
    for (Py_ssize_t i = 0; fits && i < c.n_state; ++i) {
        PyObject *x = input_at(&c, i, &fits);
        if (x == NULL) continue;
        uintptr_t a = device_address(x, (int)protocol, type, dtype, dev, c.n, PyTuple_GET_ITEM(c.in_shapes, i));
        fits = a != 0;
        c.words[c.n_out + i] = (uint64_t)a;
    }
    for (Py_ssize_t j = 0; fits && j < c.n_out; ++j) {
        PyObject *o = PyTuple_GET_ITEM(c.outs, j);
        uintptr_t a = made ? made_address(o, (int)protocol)
                           : device_address(o, (int)protocol, type, dtype, dev, c.n, PyTuple_GET_ITEM(c.out_shapes, j));
        fits = a != 0;
        c.words[j] = (uint64_t)a;
    }
    if (!fits) Py_RETURN_NONE;
    if (has_stream) c.words[c.n_index + 5] = stream;
    return PyLong_FromLong(call_entry(&c));
}

#define NONFINITE_INPUT (-1000) /* GRID_ABI_NONFINITE_INPUT, GRID_ABI_BAD_QUATERNION (abi_support.h) */
#define BAD_QUATERNION (-900)

/* Value i of a float32 ('f') or float64 ('d') buffer, as a double. */
static double value_at(const Py_buffer *view, Py_ssize_t i) {
    return view->itemsize == 4 ? (double)((const float *)view->buf)[i] : ((const double *)view->buf)[i];
}

static PyObject *values(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "values() takes 7 arguments");
        return NULL;
    }
    PyObject *ins = args[0], *in_shapes = args[1], *quaternions = args[4];
    Py_ssize_t configuration = PyLong_AsSsize_t(args[2]), nq = PyLong_AsSsize_t(args[3]);
    double lo = PyFloat_AsDouble(args[5]), hi = PyFloat_AsDouble(args[6]);
    if (PyErr_Occurred()) return NULL;
    if (!PyTuple_Check(ins) || !PyTuple_Check(in_shapes) || !PyTuple_Check(quaternions) || nq <= 0 ||
        PyTuple_GET_SIZE(ins) > PyTuple_GET_SIZE(in_shapes)) {
        PyErr_SetString(PyExc_TypeError, "values(): malformed plan");
        return NULL;
    }
    long code = 0;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(ins); ++k) {
        PyObject *x = PyTuple_GET_ITEM(ins, k), *shape = PyTuple_GET_ITEM(in_shapes, k);
        if (x == Py_None) continue;
        Py_buffer view;
        if (!PyObject_CheckBuffer(x) || PyObject_GetBuffer(x, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        const char *f = view.format != NULL ? view.format : "";
        if (*f == '=' || *f == '<' || *f == '@') ++f; /* native order (x86-64: little-endian) */
        const Py_ssize_t dims = PyTuple_GET_SIZE(shape), batch = view.ndim - dims;
        int fits = ((f[0] == 'd' && view.itemsize == 8) || (f[0] == 'f' && view.itemsize == 4)) && f[1] == '\0' &&
                   (batch == 0 || batch == 1);
        for (Py_ssize_t d = 0; fits && d < dims; ++d)
            fits = view.shape[d + batch] == PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, d));
        if (!fits) {
            PyBuffer_Release(&view);
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        const Py_ssize_t count = view.len / view.itemsize;
        int finite = 1;
        for (Py_ssize_t i = 0; i < count; ++i) {
            const double v = value_at(&view, i);
            finite &= v - v == 0.0; /* NaN and inf give NaN */
        }
        if (!finite && code == 0) code = NONFINITE_INPUT - (long)k;
        for (Py_ssize_t r = 0; code == 0 && k == configuration && r < count / nq; ++r) {
            for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(quaternions); ++j) {
                const Py_ssize_t at = r * nq + PyLong_AsSsize_t(PyTuple_GET_ITEM(quaternions, j));
                double nn = 0.0;
                for (int c = 0; c < 4; ++c) nn += value_at(&view, at + c) * value_at(&view, at + c);
                if (!(nn >= lo && nn <= hi)) code = BAD_QUATERNION;
            }
        }
        PyBuffer_Release(&view);
        if (code != 0) break;
    }
    if (PyErr_Occurred()) return NULL;
    return PyLong_FromLong(code);
}

static PyMethodDef methods[] = {
    {"host", (PyCFunction)(void (*)(void))host, METH_FASTCALL, "Validate numpy arrays and call a packed host entry."},
    {"device", (PyCFunction)(void (*)(void))device, METH_FASTCALL,
     "Validate PyTorch or CuPy arrays and call a packed entry."},
    {"values", (PyCFunction)(void (*)(void))values, METH_FASTCALL,
     "Check the values of host arrays as a host entry does."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_grid_fastcall", NULL, -1, methods};

PyMODINIT_FUNC PyInit__grid_fastcall(void) {
    const char *names[] = {"dtype", "shape", "get_device", "is_contiguous", "data_ptr", "flags",
                           "c_contiguous", "device", "id", "data", "ptr", "requires_grad"};
    PyObject **slots[] = {&s_dtype, &s_shape, &s_get_device, &s_is_contiguous, &s_data_ptr, &s_flags,
                          &s_c_contiguous, &s_device, &s_id, &s_data, &s_ptr, &s_requires_grad};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i) {
        *slots[i] = PyUnicode_InternFromString(names[i]);
        if (*slots[i] == NULL) return NULL;
    }
    return PyModule_Create(&module);
}
