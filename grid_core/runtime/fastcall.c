/* The lean call paths of the runtime in C: validate the arrays (numpy through the buffer
 * protocol; PyTorch and CuPy through their attributes), pack the C ABI's argument words and
 * call the packed entry with the GIL released.  Built on first use by grid_core.runtime.fastcall (cached by
 * content); without a C compiler or Python's headers the same path runs in Python.
 *
 * host(entry, template, nwords, n_index, itemsize, format, n, outs, out_shapes, ins, in_shapes,
 *      required) -> int | None
 *   entry       address of int grid_abi_<alg>_<f32|f64>_host_packed(const uint64_t *)
 *   template    address of the plan's nwords prefilled words (params, launch settings)
 *   outs, ins   tuples of arrays (ins may be shorter than in_shapes; None = not given)
 *   n           the batch size: every array is (n, *shape)
 *   *_shapes    tuples of per-state shapes
 *   required    tuple of bools, one per state input
 * Returns the entry's return code, or None when an array does not fit (wrong type, dtype,
 * shape, layout, or read-only output): the caller then takes its general path.
 *
 * device(entry, template, nwords, n_index, protocol, type, dtype, device, stream, n, outs,
 *        out_shapes, ins, in_shapes, required) -> int | None
 *   The same for CUDA arrays, calling the packed device entry (asynchronous on `stream`):
 *   every array must be exactly of `type`, of `dtype`, on `device`, C-contiguous, (n, *shape).
 *   protocol 0 (PyTorch): x.dtype is dtype, x.get_device(), x.is_contiguous(), x.data_ptr();
 *   protocol 1 (CuPy): x.dtype == dtype, x.device.id, x.flags.c_contiguous, x.data.ptr.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_WORDS 64
#define MAX_ARRAYS 32

typedef int (*packed_entry)(const uint64_t *);

/* One array as (n, *shape) of the given item format, C-contiguous; 1 on success (view held). */
static int take(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t n, PyObject *shape, Py_ssize_t itemsize,
                char format) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (!PyObject_CheckBuffer(obj) || PyObject_GetBuffer(obj, view, flags) != 0) {
        PyErr_Clear();
        return 0;
    }
    Py_ssize_t dims = PyTuple_GET_SIZE(shape);
    int ok = view->itemsize == itemsize && view->format != NULL && view->format[0] == format &&
             view->format[1] == '\0' && view->ndim == dims + 1 && view->shape[0] == n && view->len > 0;
    for (Py_ssize_t k = 0; ok && k < dims; ++k) {
        ok = view->shape[k + 1] == PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, k));
    }
    if (!ok) {
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

static PyObject *host(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError, "host() takes 12 arguments");
        return NULL;
    }
    packed_entry entry = (packed_entry)PyLong_AsVoidPtr(args[0]);
    const uint64_t *template_words = (const uint64_t *)PyLong_AsVoidPtr(args[1]);
    Py_ssize_t nwords = PyLong_AsSsize_t(args[2]);
    Py_ssize_t n_index = PyLong_AsSsize_t(args[3]);
    Py_ssize_t itemsize = PyLong_AsSsize_t(args[4]);
    PyObject *format = args[5];
    Py_ssize_t n = PyLong_AsSsize_t(args[6]);
    PyObject *outs = args[7], *out_shapes = args[8], *ins = args[9], *in_shapes = args[10], *required = args[11];
    if (PyErr_Occurred()) return NULL;
    if (!PyTuple_Check(outs) || !PyTuple_Check(out_shapes) || !PyTuple_Check(ins) || !PyTuple_Check(in_shapes) ||
        !PyTuple_Check(required) || !PyUnicode_Check(format) || PyUnicode_GET_LENGTH(format) != 1) {
        PyErr_SetString(PyExc_TypeError, "host(): malformed plan");
        return NULL;
    }
    Py_ssize_t n_out = PyTuple_GET_SIZE(outs), n_state = PyTuple_GET_SIZE(in_shapes), n_given = PyTuple_GET_SIZE(ins);
    if (nwords > MAX_WORDS || n_out + n_state > MAX_ARRAYS || n_out != PyTuple_GET_SIZE(out_shapes) ||
        n_given > n_state || n_given < 1 || n_index >= nwords || n_out + n_state > n_index) {
        PyErr_SetString(PyExc_ValueError, "host(): plan out of range");
        return NULL;
    }
    char fmt = (char)PyUnicode_READ_CHAR(format, 0);
    uint64_t words[MAX_WORDS];
    memcpy(words, template_words, (size_t)nwords * sizeof(uint64_t));
    Py_buffer views[MAX_ARRAYS];
    Py_ssize_t held = 0;
    int fits = n > 0;
    for (Py_ssize_t i = 0; fits && i < n_state; ++i) {
        PyObject *x = i < n_given ? PyTuple_GET_ITEM(ins, i) : Py_None;
        if (x == Py_None) {
            fits = !PyObject_IsTrue(PyTuple_GET_ITEM(required, i));
            words[n_out + i] = 0;
            continue;
        }
        fits = take(x, &views[held], 0, n, PyTuple_GET_ITEM(in_shapes, i), itemsize, fmt);
        if (fits) words[n_out + i] = (uint64_t)(uintptr_t)views[held++].buf;
    }
    for (Py_ssize_t j = 0; fits && j < n_out; ++j) {
        fits = take(PyTuple_GET_ITEM(outs, j), &views[held], 1, n, PyTuple_GET_ITEM(out_shapes, j), itemsize, fmt);
        if (fits) words[j] = (uint64_t)(uintptr_t)views[held++].buf;
    }
    int err = 0;
    if (fits) {
        words[n_index] = (uint64_t)n;
        Py_BEGIN_ALLOW_THREADS
        err = entry(words);
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t k = 0; k < held; ++k) PyBuffer_Release(&views[k]);
    if (!fits) Py_RETURN_NONE;
    return PyLong_FromLong(err);
}

enum { PROTOCOL_TORCH = 0, PROTOCOL_CUPY = 1 };

static PyObject *s_dtype, *s_shape, *s_get_device, *s_is_contiguous, *s_data_ptr, *s_flags, *s_c_contiguous, *s_device,
    *s_id, *s_data, *s_ptr;

/* shp (a tuple, or a subclass such as torch.Size) equals (n, *shape). */
static int same_shape(PyObject *shp, Py_ssize_t n, PyObject *shape) {
    Py_ssize_t dims = PyTuple_GET_SIZE(shape);
    if (!PyTuple_Check(shp) || PyTuple_GET_SIZE(shp) != dims + 1 || PyLong_AsSsize_t(PyTuple_GET_ITEM(shp, 0)) != n)
        return 0;
    for (Py_ssize_t k = 0; k < dims; ++k)
        if (PyLong_AsSsize_t(PyTuple_GET_ITEM(shp, k + 1)) != PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, k))) return 0;
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

static PyObject *device(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 15) {
        PyErr_SetString(PyExc_TypeError, "device() takes 15 arguments");
        return NULL;
    }
    packed_entry entry = (packed_entry)PyLong_AsVoidPtr(args[0]);
    const uint64_t *template_words = (const uint64_t *)PyLong_AsVoidPtr(args[1]);
    Py_ssize_t nwords = PyLong_AsSsize_t(args[2]);
    Py_ssize_t n_index = PyLong_AsSsize_t(args[3]);
    long protocol = PyLong_AsLong(args[4]);
    PyObject *type = args[5], *dtype = args[6];
    long dev = PyLong_AsLong(args[7]);
    uint64_t stream = (uint64_t)PyLong_AsUnsignedLongLong(args[8]);
    Py_ssize_t n = PyLong_AsSsize_t(args[9]);
    PyObject *outs = args[10], *out_shapes = args[11], *ins = args[12], *in_shapes = args[13], *required = args[14];
    if (PyErr_Occurred()) return NULL;
    if (!PyTuple_Check(outs) || !PyTuple_Check(out_shapes) || !PyTuple_Check(ins) || !PyTuple_Check(in_shapes) ||
        !PyTuple_Check(required) || !PyType_Check(type) || (protocol != PROTOCOL_TORCH && protocol != PROTOCOL_CUPY)) {
        PyErr_SetString(PyExc_TypeError, "device(): malformed plan");
        return NULL;
    }
    Py_ssize_t n_out = PyTuple_GET_SIZE(outs), n_state = PyTuple_GET_SIZE(in_shapes), n_given = PyTuple_GET_SIZE(ins);
    if (nwords > MAX_WORDS || n_out + n_state > MAX_ARRAYS || n_out != PyTuple_GET_SIZE(out_shapes) ||
        n_given > n_state || n_given < 1 || n_index + 5 >= nwords || n_out + n_state > n_index) {
        PyErr_SetString(PyExc_ValueError, "device(): plan out of range");
        return NULL;
    }
    uint64_t words[MAX_WORDS];
    memcpy(words, template_words, (size_t)nwords * sizeof(uint64_t));
    int fits = n > 0;
    for (Py_ssize_t i = 0; fits && i < n_state; ++i) {
        PyObject *x = i < n_given ? PyTuple_GET_ITEM(ins, i) : Py_None;
        if (x == Py_None) {
            fits = !PyObject_IsTrue(PyTuple_GET_ITEM(required, i));
            words[n_out + i] = 0;
            continue;
        }
        uintptr_t a = device_address(x, (int)protocol, type, dtype, dev, n, PyTuple_GET_ITEM(in_shapes, i));
        fits = a != 0;
        words[n_out + i] = (uint64_t)a;
    }
    for (Py_ssize_t j = 0; fits && j < n_out; ++j) {
        uintptr_t a = device_address(PyTuple_GET_ITEM(outs, j), (int)protocol, type, dtype, dev, n,
                                     PyTuple_GET_ITEM(out_shapes, j));
        fits = a != 0;
        words[j] = (uint64_t)a;
    }
    if (!fits) Py_RETURN_NONE;
    words[n_index] = (uint64_t)n;
    words[n_index + 5] = stream;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = entry(words);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(err);
}

static PyMethodDef methods[] = {
    {"host", (PyCFunction)(void (*)(void))host, METH_FASTCALL, "Validate numpy arrays and call a packed host entry."},
    {"device", (PyCFunction)(void (*)(void))device, METH_FASTCALL,
     "Validate CUDA arrays and call a packed device entry."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_grid_fastcall", NULL, -1, methods};

PyMODINIT_FUNC PyInit__grid_fastcall(void) {
    const char *names[] = {"dtype", "shape", "get_device", "is_contiguous", "data_ptr", "flags",
                           "c_contiguous", "device", "id", "data", "ptr"};
    PyObject **slots[] = {&s_dtype, &s_shape, &s_get_device, &s_is_contiguous, &s_data_ptr, &s_flags,
                          &s_c_contiguous, &s_device, &s_id, &s_data, &s_ptr};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i) {
        *slots[i] = PyUnicode_InternFromString(names[i]);
        if (*slots[i] == NULL) return NULL;
    }
    return PyModule_Create(&module);
}
