// The per-call check of a frozen graph's weights, as one C++ loop (see tensor_watch.py).
//
// A watch holds, for each watched tensor, its position in the pool (a call's argument tuple or a
// list of attributes), a strong reference to the tensor object, its TensorImpl, and the version
// and data pointer it had when watched. `unchanged(pool, watch)` is True only when every
// position still holds the same object with the same version and data pointer. The loop has no
// dependence between tensors, so the cache misses of cold metadata overlap; the Python check
// reads them one after another. Anything unusual (a tensor without storage or version counter,
// an exception) answers False, and the caller checks in Python.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <c10/core/TensorImpl.h>

#include <cstdint>
#include <vector>

namespace {

struct Entry {
  Py_ssize_t index;
  PyObject* object;  // owned
  c10::TensorImpl* impl;  // kept alive by `object` (set_data keeps the TensorImpl)
  uint32_t version;
  const void* data;
};

struct Watch {
  std::vector<Entry> entries;
  ~Watch() {
    for (auto& e : entries) Py_XDECREF(e.object);
  }
};

const char* kCapsule = "inductor_ext.tensor_watch";

PyObject* item(PyObject* pool, Py_ssize_t i) {
  if (PyTuple_CheckExact(pool)) return i < PyTuple_GET_SIZE(pool) ? PyTuple_GET_ITEM(pool, i) : nullptr;
  if (PyList_CheckExact(pool)) return i < PyList_GET_SIZE(pool) ? PyList_GET_ITEM(pool, i) : nullptr;
  return nullptr;
}

bool readable(c10::TensorImpl* impl) {
  return impl->version_counter().enabled() && impl->has_storage() && !impl->has_symbolic_sizes_strides();
}

void destroy(PyObject* capsule) {
  delete static_cast<Watch*>(PyCapsule_GetPointer(capsule, kCapsule));
}

// watch(pool, indices, impls) -> capsule, or None when some tensor cannot be read from C++.
// impls[j] is pool[indices[j]]._cdata (its TensorImpl's address).
PyObject* watch(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "watch(pool, indices, impls)");
    return nullptr;
  }
  PyObject *pool = args[0], *indices = args[1], *impls = args[2];
  if (!PyList_CheckExact(indices) || !PyList_CheckExact(impls) || PyList_GET_SIZE(indices) != PyList_GET_SIZE(impls)) {
    PyErr_SetString(PyExc_TypeError, "indices and impls must be lists of the same length");
    return nullptr;
  }
  auto* w = new Watch();
  try {
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(indices); ++j) {
      Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(indices, j));
      auto* impl = static_cast<c10::TensorImpl*>(PyLong_AsVoidPtr(PyList_GET_ITEM(impls, j)));
      PyObject* obj = item(pool, i);
      if (PyErr_Occurred()) throw 0;
      if (obj == nullptr || impl == nullptr || !readable(impl)) {
        delete w;
        Py_RETURN_NONE;
      }
      Py_INCREF(obj);
      w->entries.push_back({i, obj, impl, impl->version_counter().current_version(), impl->data()});
    }
  } catch (...) {
    delete w;
    if (PyErr_Occurred()) return nullptr;
    Py_RETURN_NONE;
  }
  PyObject* capsule = PyCapsule_New(w, kCapsule, destroy);
  if (capsule == nullptr) delete w;
  return capsule;
}

// unchanged(pool, capsule) -> bool
PyObject* unchanged(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "unchanged(pool, watch)");
    return nullptr;
  }
  auto* w = static_cast<Watch*>(PyCapsule_GetPointer(args[1], kCapsule));
  if (w == nullptr) return nullptr;
  PyObject* pool = args[0];
  bool same = true;
  try {
    for (const Entry& e : w->entries) {
      // no early exit: the loads of every entry are independent and can be in flight together
      same &= item(pool, e.index) == e.object;
      same &= e.impl->version_counter().current_version() == e.version;
      same &= e.impl->data() == e.data;
    }
  } catch (...) {
    same = false;
  }
  return PyBool_FromLong(same);
}

PyMethodDef methods[] = {
    {"watch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(watch)), METH_FASTCALL,
     "watch(pool, indices, impls) -> a watch, or None"},
    {"unchanged", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(unchanged)), METH_FASTCALL,
     "unchanged(pool, watch) -> whether every watched tensor is as it was"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ext_tensor_watch", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__ext_tensor_watch() { return PyModule_Create(&module); }
