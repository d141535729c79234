"""``python -m tilejit bench --target cuda``: what a CUDA launch costs the host, tilejit's
calls beside the floor, all in one process.

Two kernels, each launched on the framework's current stream:

- ``vec_add``: three float32 tensors of 1024 elements (the demo's kernel, ``n`` bound from
  the tensors);
- ``nop19``: a no-op with the arguments of tritonbench's ``launch_latency``: 5 tensors of
  one float32, 9 int32 scalars and 5 constants. The constants are compiled into the
  kernel, as Triton's ``constexpr`` are, so a call passes 14 arguments; the figures
  compare with tritonbench's TileLang, CuTe and Triton rows.

Rows, per kernel:

- the floor: a loop in C of ``cuLaunchKernel`` with arguments packed once, over the same
  driver library tilejit opened and the same module image (``_tilejit_bench_cuda``, a C
  extension built here);
- a builtin that makes one such ``cuLaunchKernel`` per Python call: the per-call floor
  from Python;
- a C extension that reads the tensors through their type's DLPack exchange API (as
  ``python -m tilejit bench``'s floor does) and the ints through CPython's C API, asks the
  exchange API for the current stream, and launches: the floor of any framework binding;
- the C loop again with ``cuCtxGetCurrent`` before each launch: the one query a
  steady-state tilejit launch adds to the launch (its context, to choose the function
  loaded there), priced alone;
- tilejit's direct call, bound handle (``kernel.bind(...)``, then ``h()``) and ``out_idx``
  call (one output allocated per call) on every backend; the direct call given
  ``tilejit.from_dlpack`` views; ``kernel.torch_op``; and ``torch.add`` beside ``vec_add``.

Each row is timed two ways. Host enqueue: calls in batches of ``batch`` (well under the
driver's queue of pending launches, so that no launch waits for the GPU), the stream
synchronised after each batch, untimed. Launch plus sync: each call followed by
``cuStreamSynchronize`` on the stream, timed. Rows are interleaved repeat by repeat; the
tables give the median and minimum over the repeats, and each row's ratio to the C loop
and to the builtin. Before anything is timed, the floors' launches are checked against
tilejit's direct call.

``python tests/bench_cuda.py --fake-driver`` runs the same rows against the test driver
(``tests/fake_cuda``), where the targets are ratios to the builtin.

>>> report, ok = run(gpu(), calls=20_000, repeats=7)
"""

from __future__ import annotations

import gc
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import tilejit

from .. import T, __version__
from ..native._build import env
from .bench import (
    EXTENSION_PRELUDE,
    Row,
    _cpu_model,
    _failed,
    _missing,
    _scaled,
    _table,
    _targets,
    extension,
    timer_for,
)
from .demo import cuda_programs

CALLS, REPEATS, BATCH = 20_000, 7, 200
BACKENDS = ("cython", "dlpack", "ctypes")
N = 1024
"""Elements of each vec_add tensor."""

NOP_TENSORS, NOP_INTS, NOP_CONSTANTS = 5, 9, (32,) * 5
"""nop19's arguments, as tritonbench's launch_latency passes them: 5 one-element float32
tensors, 9 ints (each 1) and 5 constants (each 32)."""
NOP_BLOCK = 128  # Triton's default 4 warps, TileLang's default threads

# The rows the targets apply to, and the targets: on the test driver, ratios to the
# builtin; on a GPU, the raw C loop plus a margin in ns (host enqueue).
DIRECT, BOUND = "direct call", "bound h()"
TEST_DRIVER_TARGETS = {DIRECT: 3.0, BOUND: 1.5}
GPU_MARGINS_NS = {DIRECT: 500.0, BOUND: 200.0}

RAW_LOOP = "raw cuLaunchKernel loop in C, arguments packed once"
RAW_LOOP_CONTEXT = "the same loop, cuCtxGetCurrent before each launch"
BUILTIN = "builtin: one cuLaunchKernel per Python call, arguments packed once"
EXCHANGE = "C extension: tensors through the exchange API, then cuLaunchKernel"
VIEWS = f"tilejit cython {DIRECT}, tilejit.from_dlpack views"

_MODULE = "_tilejit_bench_cuda"
# The floors of a launch. `prepare` opens the driver by the path tilejit opened (dlopen
# hands back the same loaded copy), loads the kernel's image into the current context and
# packs the launch once; the Launch it returns launches in three ways. The driver types
# are declared here, as the core declares them, so that no toolkit header is needed.
_SOURCE = EXTENSION_PRELUDE + r"""
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;

static struct {
  void *handle;
  CUresult (*cuInit)(unsigned int flags);
  CUresult (*cuDeviceGet)(CUdevice *device, int ordinal);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice device);
  CUresult (*cuCtxGetCurrent)(CUcontext *ctx);
  CUresult (*cuCtxSetCurrent)(CUcontext ctx);
  CUresult (*cuModuleLoadData)(CUmodule *module, const void *image);
  CUresult (*cuModuleGetFunction)(CUfunction *function, CUmodule module, const char *name);
  CUresult (*cuLaunchKernel)(CUfunction function, unsigned int grid_x, unsigned int grid_y,
                             unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                             unsigned int block_z, unsigned int shared_mem, CUstream stream,
                             void **params, void **extra);
  CUresult (*cuStreamSynchronize)(CUstream stream);
} drv;

static int check(CUresult rc, const char *what) {
  if (rc == 0) return 0;
  PyErr_Format(PyExc_RuntimeError, "%s failed: CUDA error %d", what, (int)rc);
  return -1;
}

static int open_driver(const char *path) {
  if (drv.handle != NULL) return 0;
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {
    PyErr_Format(PyExc_RuntimeError, "cannot open the CUDA driver %s: %s", path, dlerror());
    return -1;
  }
#define FIND(name)                                                                \
  do {                                                                            \
    if ((*(void **)&drv.name = dlsym(handle, #name)) == NULL) {                   \
      PyErr_Format(PyExc_RuntimeError, "the CUDA driver %s has no " #name, path); \
      return -1;                                                                  \
    }                                                                             \
  } while (0)
  FIND(cuInit);
  FIND(cuDeviceGet);
  FIND(cuDevicePrimaryCtxRetain);
  FIND(cuCtxGetCurrent);
  FIND(cuCtxSetCurrent);
  FIND(cuModuleLoadData);
  FIND(cuModuleGetFunction);
  FIND(cuLaunchKernel);
  FIND(cuStreamSynchronize);
#undef FIND
  drv.handle = handle;
  return 0;
}

#define MAX_PARAMS 64

/* A launch packed once. Each parameter has a kind: 'p' a tensor's address, 'i' an int32,
 * 'n' an int64 that launch_tensors reads as shape[0] of the first tensor, computing the
 * grid's x from it as ceildiv(n, block x). */
typedef struct {
  PyObject_HEAD CUfunction function;
  unsigned int grid[3], block[3];
  CUstream stream;
  int nparams, nargs;
  char kinds[MAX_PARAMS + 1];
  uint64_t values[MAX_PARAMS];
  void *params[MAX_PARAMS];
  const DLPackExchangeAPI *api; /* of the tensors' type */
} Launch;

static CUresult launch_packed(const Launch *self) {
  return drv.cuLaunchKernel(self->function, self->grid[0], self->grid[1], self->grid[2],
                            self->block[0], self->block[1], self->block[2], 0, self->stream,
                            (void **)self->params, NULL);
}

static PyObject *launch(Launch *self, PyObject *unused) {
  (void)unused;
  if (check(launch_packed(self), "cuLaunchKernel") != 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject *launch_tensors(Launch *self, PyObject *const *args, Py_ssize_t nargs) {
  uint64_t values[MAX_PARAMS];
  void *params[MAX_PARAMS];
  DLTensor view, first = {0}; /* prepare makes the first kind a tensor */
  Py_ssize_t next = 0;
  unsigned int grid_x = self->grid[0];
  if (nargs != self->nargs)
    return PyErr_Format(PyExc_TypeError, "launch_tensors takes %d arguments", self->nargs);
  for (int i = 0; i < self->nparams; ++i) {
    PyObject *arg = self->kinds[i] == 'n' ? NULL : args[next++];
    params[i] = &values[i];
    if (self->kinds[i] == 'p') {
      if (self->api->dltensor_from_py_object_no_sync(arg, &view) != 0) return NULL;
      if (next == 1) first = view;
      values[i] = (uint64_t)(uintptr_t)view.data + view.byte_offset;
    } else if (self->kinds[i] == 'i') {
      if (!PyLong_CheckExact(arg)) return PyErr_Format(PyExc_TypeError, "expected an int");
      long value = PyLong_AsLong(arg);
      if (value == -1 && PyErr_Occurred()) return NULL;
      int32_t narrow = (int32_t)value;
      memcpy(&values[i], &narrow, sizeof(narrow));
    } else {
      values[i] = (uint64_t)first.shape[0];
      grid_x = (unsigned int)((first.shape[0] + self->block[0] - 1) / self->block[0]);
    }
  }
  void *stream = NULL;
  if (self->api->current_work_stream(first.device.device_type, first.device.device_id, &stream) !=
      0)
    return NULL;
  CUresult rc =
      drv.cuLaunchKernel(self->function, grid_x, self->grid[1], self->grid[2], self->block[0],
                         self->block[1], self->block[2], 0, (CUstream)stream, params, NULL);
  if (check(rc, "cuLaunchKernel") != 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject *sync_stream(Launch *self, PyObject *unused) {
  (void)unused;
  if (check(drv.cuStreamSynchronize(self->stream), "cuStreamSynchronize") != 0) return NULL;
  Py_RETURN_NONE;
}

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static PyObject *loop(Launch *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 3) return PyErr_Format(PyExc_TypeError, "loop(calls, sync_each, query_context)");
  long long calls = PyLong_AsLongLong(args[0]);
  int sync_each = PyObject_IsTrue(args[1]), query_context = PyObject_IsTrue(args[2]);
  if ((calls == -1 && PyErr_Occurred()) || sync_each < 0 || query_context < 0) return NULL;
  CUresult rc = 0;
  const char *what = "cuLaunchKernel";
  long long start = now_ns();
  for (long long i = 0; i < calls && rc == 0; ++i) {
    CUcontext context = NULL;
    if (query_context && (rc = drv.cuCtxGetCurrent(&context)) != 0) {
      what = "cuCtxGetCurrent";
      break;
    }
    rc = launch_packed(self);
    if (rc == 0 && sync_each) {
      rc = drv.cuStreamSynchronize(self->stream);
      what = "cuStreamSynchronize";
    }
  }
  long long elapsed = now_ns() - start;
  if (check(rc, what) != 0) return NULL;
  return PyLong_FromLongLong(elapsed);
}

static PyMethodDef launch_methods[] = {
    {"launch", (PyCFunction)launch, METH_NOARGS,
     "launch(): one cuLaunchKernel with the packed arguments and stream."},
    {"launch_tensors", (PyCFunction)(void (*)(void))launch_tensors, METH_FASTCALL,
     "launch_tensors(*args): the arguments read (tensors through the exchange API, ints "
     "through the C API), then one cuLaunchKernel on the exchange API's current stream."},
    {"loop", (PyCFunction)(void (*)(void))loop, METH_FASTCALL,
     "loop(calls, sync_each, query_context) -> ns: calls launches in C, each preceded by "
     "cuCtxGetCurrent with query_context and followed by cuStreamSynchronize with "
     "sync_each; the monotonic time they took."},
    {"sync", (PyCFunction)sync_stream, METH_NOARGS, "sync(): cuStreamSynchronize on the stream."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_tilejit_bench_cuda.Launch",
    .tp_basicsize = sizeof(Launch),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A launch packed once: see prepare.",
    .tp_methods = launch_methods,
};

/* prepare(libcuda, image, name, grid, block, kinds, values, stream, tensor_type) -> Launch:
 * values holds one int per kind (for a 'p' the tensor's address); tensor_type is the type
 * whose exchange API launch_tensors reads. The image is loaded into the thread's current
 * context, else into device 0's primary context, made current. */
static PyObject *prepare(PyObject *module, PyObject *args) {
  const char *path, *name, *kinds;
  Py_buffer image;
  unsigned int grid[3], block[3];
  PyObject *values, *tensor_type;
  unsigned long long stream;
  (void)module;
  if (!PyArg_ParseTuple(args, "sy*s(III)(III)sO!KO", &path, &image, &name, &grid[0], &grid[1],
                        &grid[2], &block[0], &block[1], &block[2], &kinds, &PyTuple_Type, &values,
                        &stream, &tensor_type))
    return NULL;
  Launch *self = NULL;
  CUcontext ctx = NULL;
  CUdevice device = 0;
  CUmodule cu_module = NULL;
  CUfunction function = NULL;
  Py_ssize_t nparams = (Py_ssize_t)strlen(kinds);
  if (nparams > MAX_PARAMS || nparams != PyTuple_GET_SIZE(values) ||
      strspn(kinds, "pin") != (size_t)nparams || kinds[0] != 'p') {
    PyErr_SetString(PyExc_ValueError, "prepare: bad kinds or values");
    goto done;
  }
  if (open_driver(path) != 0 || check(drv.cuInit(0), "cuInit") != 0 ||
      check(drv.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent") != 0)
    goto done;
  if (ctx == NULL && (check(drv.cuDeviceGet(&device, 0), "cuDeviceGet") != 0 ||
                      check(drv.cuDevicePrimaryCtxRetain(&ctx, device), "retain") != 0 ||
                      check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent") != 0))
    goto done;
  if (check(drv.cuModuleLoadData(&cu_module, image.buf), "cuModuleLoadData") != 0 ||
      check(drv.cuModuleGetFunction(&function, cu_module, name), "cuModuleGetFunction") != 0)
    goto done;
  self = PyObject_New(Launch, &LaunchType);
  if (self == NULL) goto done;
  self->function = function;
  memcpy(self->grid, grid, sizeof(grid));
  memcpy(self->block, block, sizeof(block));
  self->stream = (CUstream)(uintptr_t)stream;
  self->nparams = (int)nparams;
  self->nargs = 0;
  memcpy(self->kinds, kinds, (size_t)nparams + 1);
  for (Py_ssize_t i = 0; i < nparams; ++i) {
    long long value = PyLong_AsLongLong(PyTuple_GET_ITEM(values, i));
    int32_t narrow = (int32_t)value;
    self->params[i] = &self->values[i];
    self->values[i] = kinds[i] == 'i' ? 0 : (uint64_t)value;
    if (kinds[i] == 'i') memcpy(&self->values[i], &narrow, sizeof(narrow));
    self->nargs += kinds[i] != 'n';
  }
  self->api = exchange_api_of(tensor_type);
  if (PyErr_Occurred()) Py_CLEAR(self);
done:
  PyBuffer_Release(&image);
  return (PyObject *)self;
}

static PyMethodDef module_methods[] = {
    {"prepare", prepare, METH_VARARGS, "prepare(...) -> Launch: see the source."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_tilejit_bench_cuda", NULL, -1,
                                        module_methods};

PyMODINIT_FUNC PyInit__tilejit_bench_cuda(void) {
  if (PyType_Ready(&LaunchType) < 0) return NULL;
  return PyModule_Create(&module_def);
}
"""


def _nothing() -> None:
    pass


def _same_always(launchers: list, written: tuple) -> str:
    return ""


@dataclass
class Device:
    """Where the rows run: how to make their tensors, the stream every row launches on
    (the framework's current one), and the driver tilejit opened."""

    description: str
    tensor: Callable[[int], object]  # a float32 device tensor of n elements
    stream: int
    libcuda: str
    test_driver: bool = False  # the fake driver: the targets are ratios to the builtin
    skip_torch: str = ""  # why the rows that need torch CUDA tensors do not run, or ""
    skip_out_idx: dict = field(default_factory=dict)  # {backend: why its out_idx rows do not}
    after_batch: Callable[[], None] = _nothing  # after each timed batch, untimed
    # same_launch([(name, launch), ...], written) -> "" when each launch launches what the
    # first does (``written``: the tensors the kernel writes), else the names that differ.
    same_launch: Callable[[list, tuple], str] = _same_always


def gpu() -> Device:
    """The first CUDA GPU, through torch; RuntimeError when there is none."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA GPU is available here (torch.cuda.is_available() is "
                           "False); the same rows against the test driver: python "
                           "tests/bench_cuda.py --fake-driver")

    def same_launch(launchers, written):
        seen = []
        for _, launch in launchers:
            for out in written:
                out.zero_()
            launch()
            torch.cuda.synchronize()
            seen.append([out.clone() for out in written])
        return ", ".join(name for (name, _), got in zip(launchers, seen)
                         if not all(torch.equal(x, y) for x, y in zip(got, seen[0])))

    return Device(f"{torch.cuda.get_device_name()} · torch {torch.__version__}",
                  lambda n: torch.rand(n, device="cuda"), torch.cuda.current_stream().cuda_stream,
                  env.text("TILEJIT_LIBCUDA") or "libcuda.so.1", same_launch=same_launch)


@dataclass
class Case:
    """One kernel's rows, and the synchronisation of the stream they launch on."""

    title: str
    rows: list[Row] = field(default_factory=list)
    sync: Callable[[], None] = _nothing


def _nop_program():
    """tritonbench's nop_with_args_kernel in CUDA C: t5 is written (out_idx=4 allocates
    it), the constants are compiled in."""
    tensors = [f"t{i}" for i in range(1, NOP_TENSORS + 1)]
    ints = [f"i{i}" for i in range(1, NOP_INTS + 1)]
    constants = ", ".join(f"c{i} = {value}" for i, value in enumerate(NOP_CONSTANTS, 1))
    declared = [f"{'float' if p == tensors[-1] else 'const float'} *{p}" for p in tensors]
    declared += [f"int32_t {p}" for p in ints]
    unused = "".join(f"  (void){p};\n" for p in [*tensors, *ints])
    unused += "".join(f"  (void)c{i};\n" for i in range(1, len(NOP_CONSTANTS) + 1))
    source = (f'extern "C" __global__ void nop19({", ".join(declared)}) {{\n'
              f"  constexpr int {constants};\n{unused}}}\n")
    params = [T.Buffer((1,), "float32", name=p, const=p != tensors[-1]) for p in tensors]
    params += [T.Scalar("int32", name=p) for p in ints]
    return tilejit.Program("nop19", params, source, grid=(1,), block=(NOP_BLOCK,))


def _kernels(program, out_idx: int) -> dict:
    """{backend: (kernel, kernel with out_idx)}, compiled once, or why the backend is not
    available."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # auto falling back to ctypes
        plain = tilejit.compile(program, target="cuda", execution_backend="auto")
        allocating = tilejit.compile(program, out_idx=out_idx, target="cuda",
                                     execution_backend="auto")
    kernels = {}
    for backend in BACKENDS:
        try:
            kernels[backend] = (plain.with_backend(backend), allocating.with_backend(backend))
        except ValueError as exc:
            kernels[backend] = exc
    return kernels


def _case(device: Device, title: str, program, out_idx: int, args: tuple, kinds: str,
          grid: tuple, block: tuple, written: tuple) -> Case:
    """The rows of one kernel called with ``args`` (tensors, then ints); ``kinds``,
    ``grid`` and ``block`` describe its launch to the floors (see ``prepare`` in the
    extension's source), ``written`` the tensors it writes."""
    case = Case(title)
    kernels = _kernels(program, out_idx)
    out_idx %= len(args)
    inputs = args[:out_idx] + args[out_idx + 1:]
    for backend in BACKENDS:
        names = [f"tilejit {backend} {what}" for what in (DIRECT, BOUND, "out_idx call")]
        if isinstance(kernels[backend], Exception):
            case.rows += [_missing(name, f"not available: {kernels[backend]}") for name in names]
            continue
        plain, allocating = kernels[backend]
        case.rows += [Row(names[0], plain, args, required=True),
                      Row(names[1], plain.bind(*args), required=True),
                      _missing(names[2], device.skip_out_idx[backend])
                      if backend in device.skip_out_idx
                      else Row(names[2], allocating, inputs, required=True)]
    torch_op = "tilejit cython out_idx kernel.torch_op"
    if isinstance(kernels["cython"], Exception):  # views need the wrapper too
        case.rows += [_missing(name, "no cython kernel") for name in (VIEWS, torch_op)]
    else:
        plain, allocating = kernels["cython"]
        views = tuple(a if isinstance(a, int) else tilejit.from_dlpack(a) for a in args)
        case.rows.append(Row(VIEWS, plain, views, required=True))
        case.rows.append(_missing(torch_op, device.skip_torch) if device.skip_torch
                         else Row(torch_op, allocating.torch_op, inputs, required=True))
    # What the floors launch, and what they are checked against: the first backend's.
    backend = next(b for b in BACKENDS if not isinstance(kernels[b], Exception))
    plain = kernels[backend][0]

    values = tuple(a if isinstance(a, int) else a.data_ptr() for a in args)
    values += (args[0].shape[0],) * kinds.count("n")
    try:
        launch = extension(_MODULE, _SOURCE).prepare(
            device.libcuda, Path(plain.library_path).read_bytes() + b"\0", program.name,
            grid, block, kinds, values, device.stream, type(args[0]))
    except Exception as exc:  # noqa: BLE001 - reported in the table
        case.rows[:0] = [_failed(name, exc, required=True)
                         for name in (RAW_LOOP, BUILTIN, EXCHANGE, RAW_LOOP_CONTEXT)]
        return case
    # The C loop and the builtin stay first: the launch + sync table's bases.
    case.rows[:0] = [
        Row(RAW_LOOP, lambda n, sync: launch.loop(n, sync, False), required=True,
            note="timed in C"),
        Row(BUILTIN, launch.launch, required=True),
        Row(EXCHANGE, launch.launch_tensors, args, required=True),
        Row(RAW_LOOP_CONTEXT, lambda n, sync: launch.loop(n, sync, True), required=True,
            note="timed in C: the query a steady-state tilejit launch adds")]
    case.sync = launch.sync
    differs = device.same_launch([(f"tilejit {backend} {DIRECT}", lambda: plain(*args)),
                                  (BUILTIN, launch.launch),
                                  (EXCHANGE, lambda: launch.launch_tensors(*args))], written)
    if differs:
        raise RuntimeError(f"{title}: {differs} launched other than tilejit's direct call")
    return case


def _vec_add_case(device: Device) -> Case:
    program, out_idx = cuda_programs()[0]
    a, b, c = (device.tensor(N) for _ in range(3))
    case = _case(device, f"vec_add, 3 float32 tensors of {N} elements", program, out_idx,
                 (a, b, c), "pppn", (-(-N // 256), 1, 1), (256, 1, 1), (c,))
    names = ("torch.add(a, b, out=c)", "torch.add(a, b), allocating")
    if device.skip_torch:
        case.rows += [_missing(name, device.skip_torch) for name in names]
    else:
        import torch

        case.rows += [Row(names[0], torch.add, (a, b), {"out": c}, required=True),
                      Row(names[1], torch.add, (a, b), required=True)]
    return case


def _nop_case(device: Device) -> Case:
    args = (*(device.tensor(1) for _ in range(NOP_TENSORS)), *(1,) * NOP_INTS)
    return _case(device, f"nop19, {NOP_TENSORS} float32 tensors of 1 element, {NOP_INTS} "
                 f"int32 and {len(NOP_CONSTANTS)} constants (compiled in)", _nop_program(),
                 NOP_TENSORS - 1, args, "p" * NOP_TENSORS + "i" * NOP_INTS, (1, 1, 1),
                 (NOP_BLOCK, 1, 1), ())


# ---- timing ----------------------------------------------------------------------------


def _batched(row: Row, calls: int, sync_each: bool, batch: int, case: Case,
             after_batch: Callable[[], None]) -> int:
    """ns that ``calls`` calls of ``row`` took, timed in batches of ``batch`` with the
    stream synchronised after each (untimed); with ``sync_each`` each call is followed by
    a synchronisation, timed."""
    total = 0
    for start in range(0, calls, batch):
        n = min(batch, calls - start)
        if row.name in (RAW_LOOP, RAW_LOOP_CONTEXT):
            total += row.fn(n, sync_each)
        else:
            kwnames = tuple(row.kwargs)
            timer = timer_for(len(row.args), kwnames, then=sync_each)
            then = (case.sync,) if sync_each else ()
            total += timer(n, row.fn, *then, *row.args, *(row.kwargs[k] for k in kwnames))
        case.sync()
        after_batch()
    return total


def _measure(cases: list[Case], calls: int, repeats: int, batch: int,
             after_batch: Callable[[], None]) -> dict[int, list[float]]:
    """Times every row of every case both ways: host enqueue into ``row.times``, launch
    plus sync into the returned {id(row): times}; ns per call, one per repeat."""
    live = []
    for case in cases:
        for row in case.rows:
            if row.fn is None:
                continue
            try:  # a callable that raises is reported, not timed
                _batched(row, 1, False, 1, case, after_batch)
                live.append((case, row))
            except Exception as exc:  # noqa: BLE001 - reported in the table
                row.fn, row.note = None, _failed(row.name, exc).note
    synced: dict[int, list[float]] = {id(row): [] for _, row in live}
    enabled = gc.isenabled()
    gc.disable()
    try:
        for case, row in live:
            _batched(row, max(batch, calls // 10), False, batch, case, after_batch)
        for _ in range(repeats):
            for case, row in live:
                row.times.append(_batched(row, calls, False, batch, case, after_batch) / calls)
                synced[id(row)].append(
                    _batched(row, calls, True, batch, case, after_batch) / calls)
    finally:
        if enabled:
            gc.enable()
    return synced


# ---- the report -------------------------------------------------------------------------


def _verdict(what: str, value: float | None, raw: float | None, builtin: float | None,
             test_driver: bool) -> tuple[str, float | None, float | None, str]:
    """(target, value, bound, how far: "1.23× the builtin" / "the C loop + 0.31 µs") of
    row kind ``what`` (DIRECT or BOUND), host enqueue."""
    if test_driver:
        factor = TEST_DRIVER_TARGETS[what]
        how = "" if value is None or not builtin else f"{value / builtin:.2f}× the builtin"
        return f"≤ {factor:g}× builtin", value, _scaled(factor, builtin), how
    margin = GPU_MARGINS_NS[what]
    limit = None if raw is None else raw + margin
    how = "" if value is None or raw is None else f"the C loop + {(value - raw) / 1000:.2f} µs"
    return f"≤ C loop + {margin / 1000:g} µs", value, limit, how


def _case_tables(case: Case, synced: dict, test_driver: bool) -> list[str]:
    by_name = {row.name: row for row in case.rows}
    raw, builtin = by_name[RAW_LOOP].median, by_name[BUILTIN].median
    enqueue = []
    for row in case.rows:
        what = next((w for w in (DIRECT, BOUND) if row.name.endswith(f" {w}")), None)
        target = "" if what is None else _targets(
            [_verdict(what, row.median, raw, builtin, test_driver)[:3]])
        enqueue.append((row, (raw, builtin), target))
    with_sync = [Row(row.name, note=row.note, times=synced.get(id(row), []))
                 for row in case.rows]
    bases = (with_sync[0].median, with_sync[1].median)  # the C loop and the builtin
    return [*_table(f"{case.title}: host enqueue, no synchronisation per call",
                    ("× C loop", "× builtin"), enqueue), "",
            *_table(f"{case.title}: launch + cuStreamSynchronize per call",
                    ("× C loop", "× builtin"), [(row, bases, "") for row in with_sync]), ""]


def _summary(cases: list[Case], test_driver: bool) -> list[str]:
    """tilejit cython's direct and bound calls against their targets, a line per case, with
    the exchange-API extension and the direct call on views measured the same way."""
    where = "test driver" if test_driver else "GPU"
    lines = [f"## Targets ({where}: tilejit cython, host enqueue)", ""]
    for case in cases:
        by_name = {row.name: row for row in case.rows}
        raw, builtin = by_name[RAW_LOOP].median, by_name[BUILTIN].median
        cells = []
        for what in (DIRECT, BOUND):
            target, value, bound, how = _verdict(
                what, by_name[f"tilejit cython {what}"].median, raw, builtin, test_driver)
            cells.append(f"{what}: {how or 'not timed'} ({_targets([(target, value, bound)])})")
        for name, row in (("the exchange-API extension", by_name[EXCHANGE]),
                          ("the direct call on views", by_name[VIEWS])):
            how = _verdict(DIRECT, row.median, raw, builtin, test_driver)[3]
            cells.append(f"{name}: {how or 'not timed'}")
        lines.append(f"- {case.title.split(',')[0]}: " + "; ".join(cells))
    return lines


def run(device: Device, calls: int = CALLS, repeats: int = REPEATS,
        batch: int = BATCH) -> tuple[str, bool]:
    """Runs the benchmark on ``device``; returns the markdown report and whether every row
    tilejit is responsible for ran.

    >>> report, ok = run(gpu(), calls=20_000, repeats=7)
    """
    start = time.perf_counter()
    cases = [_vec_add_case(device), _nop_case(device)]
    elapsed_build = time.perf_counter() - start
    synced = _measure(cases, calls, repeats, batch, device.after_batch)
    machine = (f"device: {device.description} · machine: {platform.platform()}, "
               f"{_cpu_model()} · python {platform.python_version()} · tilejit {__version__}")
    method = (f"calls: {repeats} repeats × {calls:,} calls per row, rows interleaved per "
              f"repeat; host enqueue timed in batches of {batch}, the stream synchronised "
              f"between them, untimed; median and min over the repeats · builds took "
              f"{elapsed_build:.1f} s")
    lines = ["# tilejit bench --target cuda: the host cost of a launch", "", machine, "",
             method, ""]
    for case in cases:
        lines += _case_tables(case, synced, device.test_driver)
    lines += [*_summary(cases, device.test_driver), ""]
    ok = not any(row.required and not row.times for case in cases for row in case.rows)
    return "\n".join(lines), ok


def main(args) -> int:
    """``python -m tilejit bench --target cuda``: ``args`` has ``calls``, ``repeats`` and
    ``out`` (None: the defaults). Returns 1 when there is no GPU or a row tilejit is
    responsible for could not run."""
    start = time.perf_counter()
    try:
        device = gpu()
    except RuntimeError as exc:
        print(f"tilejit bench --target cuda: {exc}", file=sys.stderr)
        return 1
    report, ok = run(device, calls=args.calls or CALLS, repeats=args.repeats or REPEATS)
    print(report, end="")
    if args.out:
        Path(args.out).write_text(report)
    print(f"\n(bench took {time.perf_counter() - start:.1f} s)", file=sys.stderr)
    return 0 if ok else 1
