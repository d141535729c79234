"""``python -m tilejit bench``: host overhead per call, tilejit beside its peers.

Four cases, each a no-op kernel on torch float32 tensors of 16 elements, so that what is
timed is the cost of getting from a Python call to the kernel's first instruction:

- A: three tensors, nothing allocated;
- B: two input tensors and one output allocated per call (tilejit's ``out_idx``);
- C: 9 and 16 tensors, nothing allocated (how the cost grows with the arguments);
- D: three arguments converted once, up front, to tilejit's own objects (layout views from
  ``tilejit.from_dlpack``, and ``tilejit.Array`` from ``tilejit.empty``), then passed to
  every backend;
- F: three tensors and one or two scalars (a Python float, then a float and an int), as
  kernels with a scale or an offset take them.

Every implementation is timed in the same process, in the same way: a tight Python
``for`` over ``range`` calling the callable with arguments bound to locals, ``calls``
times per repeat, ``gc`` off, after a warm-up. Rows are interleaved repeat by repeat, so
that a slow patch of the machine lands on every row rather than on one. The table gives
the median and the minimum over the repeats of the time per call.

Peers: apache-tvm-ffi (``tvm_ffi.cpp.load_inline``), TileLang-style ctypes marshalling,
a pybind11 extension from ``torch.utils.cpp_extension.load_inline``, and two floors: a
hand-written METH_FASTCALL extension that reads each tensor through torch's DLPack C
exchange API and does nothing else (the floor), and a Python ``*args`` function that
hands its argument tuple to a no-op C function in one ctypes (``PyDLL``) call, the least
any ctypes backend can cost (the ctypes floor). Everything the bench compiles is cached
under ``<tilejit cache>/bench``.

Benchmarks are not tests: nothing here fails on a number; missed targets are reported.

>>> python -m tilejit bench --out bench.md
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import tilejit

from .. import T, __version__
from ..builder import compiler
from ..builder.tuning import cpu_model as _cpu_model
from ..native._build import build_tools, disk_cache, elf, toolchain

N = 16
"""Elements per tensor."""

# Of the total calls per row, how many run untimed first (at least _WARMUP_MIN).
_WARMUP_FRACTION = 10
_WARMUP_MIN = 1000
REPORT_MIN_CALLS = 100_000

WIDE = (9, 16)
"""Tensor counts of case C."""

BACKENDS = ("cython", "dlpack", "ctypes")


def _names(count: int) -> list[str]:
    """Parameter names of a no-op of ``count`` tensors: t0, t1, ..."""
    return [f"t{i}" for i in range(count)]


def _noop_source(name: str, count: int, declare: Callable[[str], str]) -> str:
    """A C or C++ function ``name`` of ``count`` parameters that does nothing;
    ``declare(p)`` is the declaration of parameter ``p``."""
    params = _names(count)
    body = "".join(f"  (void){p};\n" for p in params)
    return f"void {name}({', '.join(declare(p) for p in params)}) {{\n{body}}}\n"


def _tilejit_program(count: int):
    """``tj_bench_noop<count>``: every tensor an input but the last (``out_idx=-1``)."""

    last = _names(count)[-1]
    source = _noop_source(f"tj_bench_noop{count}", count,
                          lambda p: f"{'' if p == last else 'const '}float *{p}")
    params = [T.Buffer((N,), "float32", name=p, const=p != last) for p in _names(count)]
    return tilejit.Program(name=f"tj_bench_noop{count}", source=source, params=params)


SCALARS = (("alpha", "float32", "float"), ("k", "int64", "int64_t"))
"""Case F's scalars, in order: (name, dtype, C type); a call takes the first one or two."""
SCALAR_VALUES = (2.0, 3)


def _scalar_source(name: str, nscalars: int, pointer: Callable[[str], str]) -> str:
    """A no-op of three tensors (``pointer(p)`` declares each) and the first ``nscalars``
    of ``SCALARS``."""
    params = [pointer(p) for p in _names(3)]
    params += [f"{ctype} {scalar}" for scalar, _, ctype in SCALARS[:nscalars]]
    body = "".join(f"  (void){p.split()[-1].lstrip('*')};\n" for p in params)
    return f"#include <stdint.h>\nvoid {name}({', '.join(params)}) {{\n{body}}}\n"


def _tilejit_scalar_program(nscalars: int):
    """``tj_bench_scalars<nscalars>``: three input tensors and ``nscalars`` scalars."""

    name = f"tj_bench_scalars{nscalars}"
    params = [T.Buffer((N,), "float32", name=p, const=True) for p in _names(3)]
    params += [T.Scalar(dtype, name=scalar) for scalar, dtype, _ in SCALARS[:nscalars]]
    return tilejit.Program(name=name, params=params,
                           source=_scalar_source(name, nscalars, lambda p: f"const float *{p}"))


# TileLang's ctypes adapter calls an exported `call` with one void* per tensor (and each
# scalar as its C type); the ctypes floor is handed the argument tuple and does nothing
# with it.
_CTYPES_SOURCE = (_noop_source("call", 3, lambda p: f"void *{p}")
                  + _noop_source("tj_bench_ctypes_floor", 1, lambda p: f"void *{p}")
                  + "".join(_scalar_source(f"call_scalars{n}", n, lambda p: f"void *{p}")
                            for n in (1, 2)))

FLOOR = "floor: C extension, exchange API only"
CTYPES_FLOOR = "ctypes floor: *args, one PyDLL call with the tuple"

# What the bench's C extensions start with: the headers, and how a consumer finds a type's
# exchange-API table (the `__dlpack_c_exchange_api__` capsule it publishes).
EXTENSION_PRELUDE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "dlpack/dlpack.h"

/* The exchange-API table `type` publishes, or NULL with an exception set. The table
 * outlives the capsule, an attribute of the type: it is alive for the whole process. */
static const DLPackExchangeAPI *exchange_api_of(PyObject *type) {
  PyObject *capsule = PyObject_GetAttrString(type, "__dlpack_c_exchange_api__");
  if (capsule == NULL) return NULL;
  const DLPackExchangeAPI *api =
      (const DLPackExchangeAPI *)PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
  Py_DECREF(capsule);
  if (api == NULL) return NULL;
  if (api->header.version.major != DLPACK_MAJOR_VERSION ||
      api->dltensor_from_py_object_no_sync == NULL || api->current_work_stream == NULL) {
    PyErr_SetString(PyExc_RuntimeError,
                    "the exchange API has another major version, or no "
                    "dltensor_from_py_object_no_sync or current_work_stream");
    return NULL;
  }
  return api;
}
"""

_FLOOR_MODULE = "_tilejit_bench_floor"
# The least any consumer of torch's exchange API can do per call: turn each argument into
# a borrowed DLTensor view. The table is fetched once, at import.
_FLOOR_SOURCE = EXTENSION_PRELUDE + r"""
static const DLPackExchangeAPI *api;

static PyObject *noop(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  DLTensor view;
  (void)self;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    if (api->dltensor_from_py_object_no_sync(args[i], &view) != 0) return NULL;
  }
  Py_RETURN_NONE;
}

/* Tensors and scalars: a float read with PyFloat_AsDouble, an int with
 * PyLong_AsLongLong, each exact type checked first, as a consumer must. */
static PyObject *mixed(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  DLTensor view;
  (void)self;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    if (PyFloat_CheckExact(args[i])) {
      volatile double value = PyFloat_AS_DOUBLE(args[i]);
      (void)value;
    } else if (PyLong_CheckExact(args[i])) {
      volatile long long value = PyLong_AsLongLong(args[i]);
      if (value == -1 && PyErr_Occurred()) return NULL;
    } else if (api->dltensor_from_py_object_no_sync(args[i], &view) != 0) {
      return NULL;
    }
  }
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"noop", (PyCFunction)(void (*)(void))noop, METH_FASTCALL,
     "noop(*tensors): reads each tensor through torch's DLPack C exchange API."},
    {"mixed", (PyCFunction)(void (*)(void))mixed, METH_FASTCALL,
     "mixed(*args): tensors through the exchange API, floats and ints through the C API."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tilejit_bench_floor", NULL, -1,
                                    methods};

PyMODINIT_FUNC PyInit__tilejit_bench_floor(void) {
  PyObject *torch = PyImport_ImportModule("torch");
  if (torch == NULL) return NULL;
  PyObject *tensor = PyObject_GetAttrString(torch, "Tensor");
  Py_DECREF(torch);
  if (tensor == NULL) return NULL;
  api = exchange_api_of(tensor);
  Py_DECREF(tensor);
  return api == NULL ? NULL : PyModule_Create(&module);
}
"""

# One module, one function per tensor count: noop3, noop9, noop16.
_TVM_FFI_SOURCE = "".join(_noop_source(f"noop{count}", count, lambda p: f"tvm::ffi::TensorView {p}")
                          for count in (3, *WIDE))

_PYBIND_SOURCE = "#include <torch/extension.h>\n" + _noop_source(
    "noop", 3, lambda p: f"torch::Tensor {p}")


@dataclass
class Row:
    """One implementation of one case: what is called, or why it is not."""

    name: str
    fn: Callable | None = None
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    note: str = ""
    required: bool = False  # a failure here (not an absent peer) fails the bench
    times: list[float] = field(default_factory=list)  # ns per call, one per repeat

    @property
    def median(self) -> float | None:
        return statistics.median(self.times) if self.times else None

    @property
    def best(self) -> float | None:
        return min(self.times) if self.times else None


def _missing(name: str, note: str, required: bool = False) -> Row:
    return Row(name, note=note, required=required)


def _failed(name: str, exc: BaseException, required: bool = False) -> Row:
    first = (str(exc).strip().splitlines() or [""])[0]
    return Row(name, note=f"failed: {type(exc).__name__}: {first}", required=required)


# ---- building and caching -------------------------------------------------------------


def _bench_dir() -> Path:
    return disk_cache.cache_root() / "bench"


def _key(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def _cached_so(stem: str, source: str, flags: list[str], suffix: str = ".so") -> Path:
    """Compiles ``source`` (C) into a shared object, once per source, flags, compiler and
    interpreter; returns its path. Cached like kernels (`build_tools/disk_cache.py`):
    locked, published atomically and checked against its recorded hash and as a whole
    library."""

    cc = compiler.find_cc()
    key = _key(source, *flags, *cc, compiler.compiler_identity(cc), build_tools.abi_tag())

    def build(output: Path) -> None:
        c_file = output.with_name(f"{stem}.c")
        c_file.write_text(source)
        command = [*cc, "-O2", "-fPIC", "-shared", *flags, str(c_file), "-o", str(output)]
        done = subprocess.run(command, capture_output=True, text=True, check=False,
                              env=toolchain.compiler_env())
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)}\n{done.stderr.strip()}")

    return disk_cache.with_fallback(lambda: disk_cache.get_or_build(
        _bench_dir() / f"{stem}-{key}", f"{stem}{suffix}", build, check=elf.problem))


def extension(name: str, source: str):
    """The CPython extension module ``name`` compiled from ``source`` (C, built against
    this interpreter's headers and the core's dlpack.h; cached) and loaded."""
    include = build_tools.source_dirs()[0] / "include"
    path = _cached_so(name, source, [*_python_includes(), f"-I{include}"],
                      suffix=sysconfig.get_config_var("EXT_SUFFIX") or ".so")
    return _load_extension(name, path)


def _load_extension(name: str, path: Path):
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _python_includes() -> list[str]:
    paths = sysconfig.get_paths()
    return sorted({f"-I{paths[key]}" for key in ("include", "platinclude") if paths.get(key)})


# ---- the implementations ----------------------------------------------------------------


def _per_tensors(count: int) -> str:
    """What a row name says of its tensor count: nothing for case A's three."""
    return "" if count == 3 else f", {count} tensors"


def _count_rows(name: Callable[[int], str], tensor_sets: list[tuple], load: Callable,
                required: bool = True) -> list[Row]:
    """One row per tuple of tensors, calling ``load()(count)``; ``load`` builds what the
    rows share, and its failure is every row's."""
    try:
        function_for = load()
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return [_failed(name(len(tensors)), exc, required) for tensors in tensor_sets]
    return [Row(name(len(tensors)), function_for(len(tensors)), tensors, required=required)
            for tensors in tensor_sets]


def _tilejit_rows(tensors: tuple, backends=BACKENDS, alloc: bool = True
                  ) -> tuple[list[Row], list[Row], dict]:
    """No-allocation rows (and, with ``alloc``, out_idx rows) of a no-op on ``tensors`` for
    each backend; also the no-allocation kernels by backend (those that could be made)."""
    import warnings


    count = len(tensors)
    plain_name = [f"tilejit {backend}{_per_tensors(count)}" for backend in backends]
    alloc_name = [f"tilejit {backend} (out_idx)" for backend in backends]
    rows_plain: list[Row] = []
    rows_alloc: list[Row] = []
    try:
        program = _tilejit_program(count)
        # "auto" still compiles when the wrapper cannot be built (it falls back to ctypes),
        # so that a broken wrapper fails the cython rows only; its warning is the
        # with_backend("cython") failure reported below.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            plain = tilejit.compile(program, execution_backend="auto", compile_flags=[])
            allocating = (tilejit.compile(program, out_idx=-1, execution_backend="auto",
                                          compile_flags=[]) if alloc else None)
    except Exception as exc:  # noqa: BLE001 - reported in the table
        rows_plain = [_failed(name, exc, required=True) for name in plain_name]
        rows_alloc = [_failed(name, exc, required=True) for name in alloc_name] if alloc else []
        return rows_plain, rows_alloc, {}

    kernels = {}
    for backend, name, name_alloc in zip(backends, plain_name, alloc_name):
        # A backend that with_backend refuses is not there yet (not a failure); one it
        # accepts must work.
        try:
            k_plain = plain.with_backend(backend)
            k_alloc = allocating.with_backend(backend) if alloc else None
        except ValueError as exc:
            row, row_alloc = (_missing(n, f"not available: {exc}") for n in (name, name_alloc))
        except Exception as exc:  # noqa: BLE001 - reported in the table
            row, row_alloc = (_failed(n, exc, required=True) for n in (name, name_alloc))
        else:
            kernels[backend] = k_plain
            row = Row(name, k_plain, tensors, required=True)
            row_alloc = Row(name_alloc, k_alloc, tensors[:-1], required=True)
        rows_plain.append(row)
        if alloc:
            rows_alloc.append(row_alloc)
    return rows_plain, rows_alloc, kernels


def _view_rows(kernels: dict, tensors: tuple) -> list[tuple[str, Row]]:
    """Case D, (backend, row) pairs: each backend's no-op given arguments converted once,
    up front: layout views of ``tensors`` (``tilejit.from_dlpack``), and as many
    ``tilejit.empty`` Arrays."""

    # Views of copies: a view holds the tensor's storage through DLPack, and torch reads a
    # tensor that something else co-owns about 40 ns faster through the exchange API, so
    # views of the timed tensors would put every other row in that less common state.
    kinds = (("from_dlpack views",
              lambda: tuple(tilejit.from_dlpack(t.clone()) for t in tensors)),
             ("tilejit.Array", lambda: tuple(tilejit.empty((N,), "float32") for _ in tensors)))
    converted = {}
    for kind, convert in kinds:
        try:
            converted[kind] = convert()
        except Exception as exc:  # noqa: BLE001 - reported in the table
            converted[kind] = exc
    rows = []
    for backend in BACKENDS:
        for kind, _ in kinds:
            name = f"tilejit {backend}, {kind}"
            args = converted[kind]
            if backend not in kernels:
                row = _missing(name, f"no tilejit {backend} kernel: see case A")
            elif isinstance(args, Exception):
                row = _failed(name, args, required=True)
            else:
                row = Row(name, kernels[backend], args, required=True)
            rows.append((backend, row))
    return rows


def _floor_rows(tensor_sets: list[tuple]) -> list[Row]:
    def load():
        noop = extension(_FLOOR_MODULE, _FLOOR_SOURCE).noop  # takes any number of tensors
        return lambda count: noop

    return _count_rows(lambda count: f"{FLOOR}{_per_tensors(count)}", tensor_sets, load)


def _ctypes_rows(tensor_sets: list[tuple]) -> tuple[Row, Row, list[Row]]:
    """TileLang-style rows for cases A and B (on the first tuple of tensors, three), and a
    ctypes-floor row per tuple of tensors."""
    name_a = "TileLang-style ctypes: c_void_p(t.data_ptr())"
    name_b = "TileLang-style ctypes: torch.empty + c_void_p(t.data_ptr())"
    floor_name = [f"{CTYPES_FLOOR}{_per_tensors(len(tensors))}" for tensors in tensor_sets]
    try:
        path = str(_cached_so("tilejit_bench_ctypes", _CTYPES_SOURCE, []))
        lib = ctypes.CDLL(path)
        # The GIL kept, as tilejit's builtin entry (tj_host_method) keeps it.
        floor_fn = ctypes.PyDLL(path).tj_bench_ctypes_floor
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return (_failed(name_a, exc, required=True), _failed(name_b, exc, required=True),
                [_failed(name, exc, required=True) for name in floor_name])
    import torch

    lib.call.restype = None
    floor_fn.restype, floor_fn.argtypes = None, [ctypes.py_object]
    c_void_p = ctypes.c_void_p
    empty = torch.empty
    float32 = torch.float32

    # As TileLang's ctypes adapter does it: one c_void_p per tensor, built per call.
    def call(*tensors):
        lib.call(*[c_void_p(t.data_ptr()) for t in tensors])

    def call_alloc(*inputs):
        out = empty((N,), dtype=float32)
        lib.call(*[c_void_p(t.data_ptr()) for t in (*inputs, out)])
        return out

    def ctypes_floor(*args):
        floor_fn(args)

    a, b, c = tensor_sets[0]
    return (Row(name_a, call, (a, b, c), required=True),
            Row(name_b, call_alloc, (a, b), required=True),
            [Row(name, ctypes_floor, tensors, required=True)
             for name, tensors in zip(floor_name, tensor_sets)])


def _scalar_rows(tensors: tuple) -> list[list[Row]]:
    """Case F: per count of scalars (1, 2), the rows of a no-op on three tensors and the
    scalars: tilejit's backends, TileLang-style ctypes, and the two floors."""
    import warnings


    cases = []
    for nscalars in (1, 2):
        args = (*tensors, *SCALAR_VALUES[:nscalars])
        suffix = f", {nscalars} scalar{'s' if nscalars > 1 else ''}"
        rows = []
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                kernel = tilejit.compile(_tilejit_scalar_program(nscalars),
                                         execution_backend="auto", compile_flags=[])
            rows += [Row(f"tilejit {backend}{suffix}", kernel.with_backend(backend), args,
                         required=True) for backend in BACKENDS]
        except Exception as exc:  # noqa: BLE001 - reported in the table
            rows += [_failed(f"tilejit {backend}{suffix}", exc, required=True)
                     for backend in BACKENDS]
        rows.append(_tilelang_style_scalars(nscalars, suffix, args))
        rows += _scalar_floor_rows(suffix, args)
        cases.append(rows)
    return cases


def _tilelang_style_scalars(nscalars: int, suffix: str, args: tuple) -> Row:
    """TileLang's ctypes marshalling with scalars: a c_void_p per tensor and each scalar
    as its ctypes type, built per call."""
    name = f"TileLang-style ctypes{suffix}"
    try:
        lib = ctypes.CDLL(str(_cached_so("tilejit_bench_ctypes", _CTYPES_SOURCE, [])))
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return _failed(name, exc, required=True)
    fn = getattr(lib, f"call_scalars{nscalars}")
    fn.restype = None
    c_void_p, c_float, c_int64 = ctypes.c_void_p, ctypes.c_float, ctypes.c_int64
    if nscalars == 1:
        def call(t0, t1, t2, alpha):
            fn(c_void_p(t0.data_ptr()), c_void_p(t1.data_ptr()), c_void_p(t2.data_ptr()),
               c_float(alpha))
    else:
        def call(t0, t1, t2, alpha, k):
            fn(c_void_p(t0.data_ptr()), c_void_p(t1.data_ptr()), c_void_p(t2.data_ptr()),
               c_float(alpha), c_int64(k))
    return Row(name, call, args, required=True)


def _scalar_floor_rows(suffix: str, args: tuple) -> list[Row]:
    """The floor (the extension reading the tensors through the exchange API and the
    scalars through the C API) and the ctypes floor, on ``args``."""
    names = [f"{FLOOR}, scalars through the C API{suffix}", f"{CTYPES_FLOOR}{suffix}"]
    try:
        mixed = extension(_FLOOR_MODULE, _FLOOR_SOURCE).mixed
        floor_fn = ctypes.PyDLL(str(_cached_so("tilejit_bench_ctypes", _CTYPES_SOURCE, [])))
        floor_fn = floor_fn.tj_bench_ctypes_floor
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return [_failed(name, exc, required=True) for name in names]
    floor_fn.restype, floor_fn.argtypes = None, [ctypes.py_object]

    def ctypes_floor(*items):
        floor_fn(items)

    return [Row(names[0], mixed, args, required=True),
            Row(names[1], ctypes_floor, args, required=True)]


def _scalar_table(rows: list[Row], suffix: str) -> list[tuple[Row, tuple, str]]:
    """Case F's rows with their ratios to the two floors and tilejit's targets."""
    by_name = {row.name: row for row in rows}
    floor = by_name[f"{FLOOR}, scalars through the C API{suffix}"]
    ctypes_floor = by_name[f"{CTYPES_FLOOR}{suffix}"]
    tile_lang = by_name[f"TileLang-style ctypes{suffix}"]
    table = []
    for row in rows:
        checks = []
        if row.name == f"tilejit cython{suffix}":
            checks = [("≤ 1.25× floor", row.median, _scaled(1.25, floor.median))]
        elif row.name == f"tilejit ctypes{suffix}":
            checks = [("≤ TileLang-style ctypes", row.median, tile_lang.median),
                      ("≤ 2× ctypes floor", row.median, _scaled(2, ctypes_floor.median))]
        table.append((row, (floor.median, ctypes_floor.median), _targets(checks)))
    return table


def _tvm_ffi_rows(tensor_sets: list[tuple]) -> list[Row]:
    def name(count):
        return f"apache-tvm-ffi (TensorView x{count})"

    try:
        import tvm_ffi
        import tvm_ffi.cpp
    except ImportError:
        return [_missing(name(len(tensors)), "not installed: `pip install apache-tvm-ffi`")
                for tensors in tensor_sets]

    def load():
        key = _key(_TVM_FFI_SOURCE, tvm_ffi.__version__, build_tools.abi_tag())
        module = tvm_ffi.cpp.load_inline(
            name="tilejit_bench_noop", cpp_sources=_TVM_FFI_SOURCE,
            functions=[f"noop{count}" for count in (3, *WIDE)],
            build_directory=str(_bench_dir() / f"tvm-ffi-{key}"))
        return lambda count: getattr(module, f"noop{count}")

    return _count_rows(name, tensor_sets, load, required=False)


def _tilelang_rows(a, b, c) -> list[Row]:
    """Case E: a no-op TileLang kernel on target "c" (3 tensors; and 2 inputs + 1 out_idx
    output) through execution_backend="tilejit" and through TileLang's own "cython"."""
    names = [f"TileLang {backend}{suffix}" for suffix in ("", " (out_idx)")
             for backend in ("tilejit", "cython")]
    try:
        import tilelang
        import tilelang.language as TL

        from .. import tilelang as _registers  # noqa: F401
    except ImportError as exc:
        return [_missing(name, f"not installed ({exc})") for name in names]
    from .tilelang_defs import noop_kernel

    noop = noop_kernel(TL)

    rows = []
    for out_idx, args in ((None, (a, b, c)), (-1, (a, b))):
        for backend in ("tilejit", "cython"):
            name = names[len(rows)]
            try:
                kernel = tilelang.compile(noop, out_idx=out_idx, target="c",
                                          execution_backend=backend)
                rows.append(Row(name, kernel, args, required=backend == "tilejit"))
            except Exception as exc:  # noqa: BLE001  (a peer that fails is reported)
                rows.append(_failed(name, exc, required=backend == "tilejit"))
    return rows


def _pybind_row(a, b, c, quick: bool) -> Row:
    name = "torch cpp_extension.load_inline (pybind11, torch::Tensor x3)"
    if quick:
        return _missing(name, "skipped (--quick): its first build takes about a minute")
    try:
        import torch
        from torch.utils import cpp_extension

        key = _key(_PYBIND_SOURCE, torch.__version__, build_tools.abi_tag())
        directory = _bench_dir() / f"pybind-{key}"
        directory.mkdir(parents=True, exist_ok=True)
        if not any(directory.glob("*.so")):
            print(f"tilejit bench: building the pybind11 extension in {directory} "
                  "(about a minute, once)", file=sys.stderr, flush=True)
        module = cpp_extension.load_inline(name=f"tilejit_bench_pybind_{key}",
                                           cpp_sources=_PYBIND_SOURCE, functions=["noop"],
                                           extra_cflags=["-O2"], build_directory=str(directory))
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return _failed(name, exc)
    return Row(name, module.noop, (a, b, c))


# ---- timing ----------------------------------------------------------------------------

_timers: dict[tuple[int, tuple[str, ...], bool], Callable] = {}


def timer_for(nargs: int, kwnames: tuple[str, ...], then: bool = False) -> Callable:
    """``timer(n, f, *args, **kwargs) -> ns`` for ``n`` calls ``f(*args, **kwargs)``,
    generated so that the loop body is one call with every argument a local variable (no
    ``*args`` unpacking in the loop), like ``timeit`` does. With ``then``, the timer is
    ``timer(n, f, then, *args, **kwargs)`` and calls ``then()`` after each call."""
    timer = _timers.get((nargs, kwnames, then))
    if timer is None:
        params = [f"a{i}" for i in range(nargs)] + [f"k{i}" for i in range(len(kwnames))]
        call = [f"a{i}" for i in range(nargs)] + [f"{k}=k{i}" for i, k in enumerate(kwnames)]
        source = (f"def timer(_n, _f, {'_then, ' if then else ''}{', '.join(params)}):\n"
                  "    _clock = _perf_counter_ns\n"
                  "    _t0 = _clock()\n"
                  "    for _ in range(_n):\n"
                  f"        _f({', '.join(call)})\n"
                  + ("        _then()\n" if then else "")
                  + "    return _clock() - _t0\n")
        namespace = {"_perf_counter_ns": time.perf_counter_ns}
        exec(compile(source, "<tilejit bench timer>", "exec"), namespace)  # noqa: S102
        timer = _timers[(nargs, kwnames, then)] = namespace["timer"]
    return timer


def _run_once(row: Row, calls: int) -> float:
    kwnames = tuple(row.kwargs)
    timer = timer_for(len(row.args), kwnames)
    return timer(calls, row.fn, *row.args, *(row.kwargs[k] for k in kwnames)) / calls


def _measure(rows: list[Row], calls: int, repeats: int, progress=None) -> None:
    """Times every row ``repeats`` times, ``calls`` calls each, interleaved; ``progress``
    (one line of text at a time) hears how long the timing will take, measured on the
    untimed warm-up, and each repeat as it ends."""
    live = [row for row in rows if row.fn is not None]
    warmup = max(_WARMUP_MIN, calls // _WARMUP_FRACTION)
    for row in live:
        # A callable that raises is reported, not timed.
        try:
            row.fn(*row.args, **row.kwargs)
        except Exception as exc:  # noqa: BLE001 - reported in the table
            failed = _failed(row.name, exc, row.required)
            row.fn, row.note = None, failed.note
    live = [row for row in live if row.fn is not None]
    enabled = gc.isenabled()
    gc.disable()
    try:
        started = time.perf_counter()
        for row in live:
            _run_once(row, warmup)
        left = (time.perf_counter() - started) * calls * repeats / warmup
        if progress is not None:
            progress(f"timing {len(live)} rows, {repeats} repeats of {calls} calls: about "
                     f"{left:.0f} s")
        for i in range(repeats):
            for row in live:
                row.times.append(_run_once(row, calls))
            if progress is not None:
                progress(f"repeat {i + 1} of {repeats} done")
    finally:
        if enabled:
            gc.enable()


# ---- the report -------------------------------------------------------------------------


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except Exception:  # noqa: BLE001 - absent or broken: say so
        return "not installed"


def _ns(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _ratio(value: float | None, base: float | None) -> str:
    return "—" if value is None or not base else f"{value / base:.2f}×"


def _targets(checks: list[tuple[str, float | None, float | None]]) -> str:
    """``checks``: (what, value, bound) -> "what: met" / "what: missed" / "what: n/a"."""
    cells = []
    for what, value, bound in checks:
        verdict = "n/a" if value is None or bound is None else (
            "met" if value <= bound else "missed")
        cells.append(f"{what}: {verdict}")
    return "; ".join(cells)


def _table(title: str, ratio_names: tuple[str, ...],
           rows: list[tuple[Row, tuple[float | None, ...], str]]) -> list[str]:
    """A markdown table; each row comes with one base per ratio column (the ratio is its
    median over the base; None: no ratio) and its target cell."""
    ratio_head = "".join(f" {name} |" for name in ratio_names)
    lines = [f"## {title}", "",
             f"| implementation | median ns/call | min ns/call |{ratio_head} target | notes |",
             "|---|---:|---:|" + "---:|" * len(ratio_names) + "---|---|"]
    for row, bases, target in rows:
        note = row.note.replace("|", "\\|")  # compiler output must not split the row
        ratios = "".join(f" {_ratio(row.median, base)} |" for base in bases)
        lines.append(f"| {row.name} | {_ns(row.median)} | {_ns(row.best)} |{ratios} "
                     f"{target} | {note} |")
    return lines


def _header(calls: int, repeats: int, quick: bool, elapsed_build: float) -> list[str]:
    fewer = f" (fewer than the {REPORT_MIN_CALLS:,} a reportable run uses)" if calls < REPORT_MIN_CALLS \
        else ""
    machine = (f"machine: {platform.platform()}, {_cpu_model()} ({os.cpu_count()} logical "
               f"CPUs) · python {platform.python_version()} · torch {_version('torch')} · "
               f"apache-tvm-ffi {_version('tvm_ffi')} · tilelang {_version('tilelang')} · "
               f"tilejit {__version__}")
    method = (f"calls: {repeats} repeats × {calls:,} calls per row{fewer}, rows interleaved per "
              f"repeat, after {max(_WARMUP_MIN, calls // _WARMUP_FRACTION):,} warm-up calls; "
              f"median and min over the repeats · builds took {elapsed_build:.1f} s"
              + (" · --quick" if quick else ""))
    return ["# tilejit bench: host overhead per call", "", machine, "", method]


def _scaled(factor: float, base: float | None) -> float | None:
    return None if base is None else factor * base


def _no_alloc_table(rows: list[Row], count: int, tvm: Row, floor: Row, ctypes_floor: Row,
                    tile_lang: Row | None = None) -> list[tuple[Row, tuple, str]]:
    """Rows of a no-allocation case on ``count`` tensors, with their ratios to the two
    floors on as many tensors and the targets of tilejit's cython rows, and of its ctypes
    row where ``tile_lang`` (case A's TileLang-style row) is given. The ctypes floor never
    reads a tensor, so its 2× bound is case A's only: at 16 tensors the exchange-API
    reads alone (the floor) cost more than twice it."""
    bases = (floor.median, ctypes_floor.median)
    table = []
    for row in rows:
        checks = []
        if row.name == f"tilejit cython{_per_tensors(count)}":
            checks = [("≤ apache-tvm-ffi", row.median, tvm.median),
                      ("≤ 1.25× floor", row.median, _scaled(1.25, floor.median))]
        elif row.name == f"tilejit ctypes{_per_tensors(count)}" and tile_lang is not None:
            checks = [("≤ TileLang-style ctypes", row.median, tile_lang.median),
                      ("≤ 2× ctypes floor", row.median, _scaled(2, ctypes_floor.median))]
        table.append((row, bases, _targets(checks)))
    return table


def run(calls: int = REPORT_MIN_CALLS, repeats: int = 11, quick: bool = False) -> tuple[str, bool]:
    """Runs the benchmark; returns the markdown report and whether every row that tilejit
    itself is responsible for (its backends, the floors, ctypes, torch.empty) ran.

    >>> report, ok = run(calls=100_000, repeats=11)
    """
    start = time.perf_counter()
    rows = _cpu_rows(quick)
    elapsed_build = time.perf_counter() - start
    _measure(rows.every, calls, repeats)
    reference = _reference_row(rows)
    lines = [*_header(calls, repeats, quick, elapsed_build), "", *_cpu_tables(rows, reference)]
    ok = not any(row.required and not row.times for row in [*rows.every, reference])
    return "\n".join(lines), ok


@dataclass
class _CpuRows:
    """The rows of `run`'s tables A to F, made (not measured yet)."""

    a: list  # A: tilejit's backends and the peers on 3 tensors, no allocation
    b: list  # B: out_idx allocation
    c: list  # C: per tensor count of WIDE, A's rows on more tensors
    d: list  # D: (backend, row) over arguments converted up front
    e: list  # E: TileLang's kernels
    f: list  # F: per scalar count, A's rows with scalars
    tvm: Row
    floors: list  # per tensor set (3, *WIDE)
    ctypes_floors: list
    tvms: list
    tl_a: Row  # TileLang-style ctypes, A and B
    tl_b: Row
    empty: Row

    @property
    def every(self) -> list:
        return (self.a + self.b + [row for rows in self.c for row in rows]
                + [row for _, row in self.d] + self.e + [row for rows in self.f for row in rows])


def _cpu_rows(quick: bool) -> _CpuRows:
    import torch

    tensors = tuple(torch.rand(N, dtype=torch.float32) for _ in range(max(WIDE)))
    tensor_sets = [tensors[:count] for count in (3, *WIDE)]  # cases A, then C
    a, b, c = tensor_sets[0]
    tj_a, tj_b, kernels = _tilejit_rows(tensor_sets[0])
    tj_wide = [_tilejit_rows(ts, ("cython", "ctypes"), alloc=False)[0] for ts in tensor_sets[1:]]
    floors = _floor_rows(tensor_sets)
    tl_a, tl_b, ctypes_floors = _ctypes_rows(tensor_sets)
    tvms = _tvm_ffi_rows(tensor_sets)
    pybind = _pybind_row(a, b, c, quick)
    empty = Row("torch.empty((16,), dtype=torch.float32) alone", torch.empty, ((N,),),
                {"dtype": torch.float32}, required=True)
    return _CpuRows(
        a=[*tj_a, tvms[0], tl_a, pybind, floors[0], ctypes_floors[0]],
        b=[*tj_b, tl_b, empty, _composite_row(kernels.get("cython"), a, b)],
        c=[[*tj_rows, tvm_n, floor_n, ctypes_floor_n] for tj_rows, tvm_n, floor_n, ctypes_floor_n
           in zip(tj_wide, tvms[1:], floors[1:], ctypes_floors[1:])],
        d=_view_rows(kernels, tensor_sets[0]), e=_tilelang_rows(a, b, c),
        f=_scalar_rows(tensor_sets[0]), tvm=tvms[0], floors=floors,
        ctypes_floors=ctypes_floors, tvms=tvms, tl_a=tl_a, tl_b=tl_b, empty=empty)


def _composite_row(tj_plain, a, b) -> Row:
    """torch.empty and a no-allocation call in one Python function (table B)."""
    import torch

    composite = Row("torch.empty + tilejit cython no-alloc call, in one Python function",
                    note="measured; includes a Python frame the sum below does not")
    if tj_plain is not None:
        float32 = torch.float32
        empty_fn = torch.empty

        def empty_then_call(x, y):
            out = empty_fn((N,), dtype=float32)
            tj_plain(x, y, out)
            return out

        composite.fn, composite.args = empty_then_call, (a, b)
    return composite


def _reference_row(rows: _CpuRows) -> Row:
    """The base of the out_idx target: torch.empty alone plus tilejit cython on A."""
    cython_a = {row.name: row for row in rows.a}["tilejit cython"].median
    reference = Row("reference: torch.empty alone + tilejit cython (A), sum of medians",
                    note="the base of the out_idx target")
    if rows.empty.median is not None and cython_a is not None:
        reference.times = [rows.empty.median + cython_a]
    return reference


def _cpu_tables(rows: _CpuRows, reference: Row) -> list[str]:
    """Tables A to F of `run`'s report, from measured rows."""
    by_name = {row.name: row for row in rows.a + rows.b}
    floor, ctypes_floor = rows.floors[0], rows.ctypes_floors[0]
    ref_ns = reference.median
    table_a = _no_alloc_table(rows.a, 3, rows.tvm, floor, ctypes_floor, rows.tl_a)
    table_b = []
    for row in [*rows.b, reference]:
        target = ""
        if row.name == "tilejit cython (out_idx)":
            target = _targets([("≤ 0.7× reference", row.median, _scaled(0.7, ref_ns))])
        elif row.name == "tilejit ctypes (out_idx)":
            target = _targets([("≤ TileLang-style ctypes", row.median, rows.tl_b.median)])
        table_b.append((row, (ref_ns,), target))
    table_c = []
    for count, wide_rows, tvm_n, floor_n, ctypes_floor_n in zip(
            WIDE, rows.c, rows.tvms[1:], rows.floors[1:], rows.ctypes_floors[1:]):
        table_c += _no_alloc_table(wide_rows, count, tvm_n, floor_n, ctypes_floor_n)
    table_d = [(row, (floor.median, by_name[f"tilejit {backend}"].median), "")
               for backend, row in rows.d]
    table_e = []
    for tilejit_row, cython_row in (rows.e[:2], rows.e[2:]):
        target = _targets([("≤ 0.5× TileLang cython", tilejit_row.median,
                            _scaled(0.5, cython_row.median))])
        table_e += [(tilejit_row, (cython_row.median,), target),
                    (cython_row, (cython_row.median,), "")]
    wide = " and ".join(str(count) for count in WIDE)
    return [
        *_table(f"A. No-op CPU kernel, 3 torch float32 tensors of {N} elements, no allocation",
                ("× floor", "× ctypes floor"), table_a),
        "",
        *_table(f"B. 2 input tensors + 1 output of {N} float32 allocated per call",
                ("× reference",), table_b),
        "",
        *_table(f"C. No-op CPU kernel, {wide} torch float32 tensors of {N} elements, no "
                "allocation (ratios to the floors on as many tensors)",
                ("× floor", "× ctypes floor"), table_c),
        "",
        *_table("D. No-op CPU kernel, 3 arguments converted once up front (layout views of "
                "the torch tensors, tilejit.Array), no allocation",
                ("× floor", "× same backend, torch tensors"), table_d),
        "",
        *_table(f"E. No-op TileLang kernel on target \"c\", {N} float32 elements: 3 tensors, "
                "then 2 inputs + 1 out_idx output; tilejit checks every argument, TileLang's "
                "cython backend (its backend for \"c\") checks none",
                ("× TileLang cython",), table_e),
        "",
        *_table(f"F. No-op CPU kernel, 3 torch float32 tensors of {N} elements and 1 scalar "
                "(a float), then 2 (a float and an int), no allocation",
                ("× floor", "× ctypes floor"),
                [entry for scalar_rows, n in zip(rows.f, (1, 2))
                 for entry in _scalar_table(scalar_rows, f", {n} scalar{'s' if n > 1 else ''}")]),
        "",
    ]


# ---- E. inside torch.compile (``--torch-compile``) ----------------------------------------

_ADD_SOURCE = """
void tj_bench_add(const float *A, const float *B, float *C, int64_t n) {
  for (int64_t i = 0; i < n; ++i) C[i] = A[i] + B[i];
}
"""


def _bench_add():
    """Cases E and F's kernel: ``C = A + B`` over float32 vectors of any length."""
    n = T.symbol("n")
    return tilejit.compile(tilejit.Program(name="tj_bench_add", source=_ADD_SOURCE, params=[
        T.Buffer((n,), "float32", name="A", const=True),
        T.Buffer((n,), "float32", name="B", const=True),
        T.Buffer((n,), "float32", name="C")]), out_idx=-1, compile_flags=[])


def run_torch_compile(calls: int = REPORT_MIN_CALLS, repeats: int = 11) -> tuple[str, bool]:
    """Case E: a tilejit kernel called inside a graph compiled by ``torch.compile``
    (inductor), where it runs as its torch op, next to ``torch.add`` in the same graph
    and in graphs of their own; and the same calls in eager mode. Returns the report and
    whether every row ran.

    >>> report, ok = run_torch_compile(calls=10_000, repeats=5)
    """
    import torch

    start = time.perf_counter()
    add = _bench_add()
    a, b = torch.rand(N), torch.rand(N)
    # The library stays registered while the rows run, and goes with this frame.
    _library, python_op = _allocating_python_op()
    rows = _torch_op_rows(add, a, b, python_op)
    recorded = _recorded_rows(add, a.clone().requires_grad_(), b)
    for row in rows[4:]:  # compiled (and checked) before anything is timed
        row.fn(a, b)
    for row in recorded:
        assert row.fn(*row.args).grad_fn is not None
    rows += recorded
    elapsed_build = time.perf_counter() - start
    _measure(rows, calls, repeats)
    # Each tilejit row against what it is to be measured by, with the target.
    references = {
        rows[3].name: (rows[2], "≤ 1.3×"),
        rows[5].name: (rows[4], "≤ 1.15×"),
        recorded[1].name: (recorded[2], "≤ 1.2×"),
    }
    base = rows[4].median
    table = []
    for row in rows:
        reference, target = references.get(row.name, (None, ""))
        table.append((row, (base, reference.median if reference else None), target))
    lines = [*_header(calls, repeats, False, elapsed_build), "",
             *_table(f"E. torch.compile (inductor, CPU): a tilejit kernel as its torch op, "
                     f"{N} float32 elements, one output allocated per call",
                     ("× compiled torch.add", "× reference"), table), ""]
    return "\n".join(lines), all(row.times for row in rows)


def _allocating_python_op():
    """``(library, op)``: the reference for what torch charges any custom op: one
    registered the same way (torch.library, CompositeExplicitAutograd) whose
    implementation is a Python function that only allocates its output."""
    import torch

    library = torch.library.Library("tilejit_bench", "FRAGMENT")
    library.define("empty_like_add(Tensor a, Tensor b) -> Tensor")
    library.impl("empty_like_add", lambda x, y: torch.empty_like(x), "CompositeExplicitAutograd")
    torch.library.register_fake("tilejit_bench::empty_like_add",
                                lambda x, y: torch.empty_like(x), lib=library)
    return library, torch.ops.tilejit_bench.empty_like_add.default


def _torch_op_rows(add, a, b, python_op) -> list:
    """Eager and compiled calls of ``add`` beside torch's own add and ``python_op`` (not
    measured yet)."""
    import torch

    def compiled(fn):
        return torch.compile(fn, fullgraph=True, backend="inductor")

    aten_add = torch.ops.aten.add.Tensor
    return [
        Row("eager: torch.add(a, b)", torch.add, (a, b), required=True),
        Row("eager: tilejit add(a, b), direct call", add, (a, b), required=True),
        Row("eager: torch.ops.aten.add.Tensor(a, b), torch's own op called as an op", aten_add,
            (a, b), required=True),
        Row("eager: add.torch_op(a, b), the op through torch's dispatcher", add.torch_op,
            (a, b), required=True, note="reference: torch's own op called as an op"),
        Row("compiled graph: torch.add(a, b)", compiled(lambda x, y: torch.add(x, y)), (a, b),
            required=True),
        Row("compiled graph: add(a, b)", compiled(lambda x, y: add(x, y)), (a, b),
            required=True, note="reference: the same graph with torch.add"),
        Row("compiled graph: a torch.library op whose Python implementation only allocates",
            compiled(lambda x, y: python_op(x, y)), (a, b), required=True,
            note="what torch charges any custom op it calls from a compiled graph"),
        Row("compiled graph: add(torch.add(a, b), b)",
            compiled(lambda x, y: add(torch.add(x, y), y)), (a, b), required=True,
            note="minus the torch.add graph: what the tilejit op adds to a graph"),
        Row("compiled graph: torch.add(torch.add(a, b), b)",
            compiled(lambda x, y: torch.add(torch.add(x, y), y)), (a, b), required=True,
            note="inductor fuses the two adds into one loop"),
    ]


def _recorded_rows(add, a_grad, b) -> list:
    """Calls that autograd records: the kernel with its backward registered, against a
    hand-written autograd.Function around the direct call and torch's own add."""
    import torch

    add.register_autograd(lambda ctx, grad: (grad, grad))

    class HandWritten(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            return add(x, y)

        @staticmethod
        def backward(ctx, grad):
            return grad, grad

    return [
        Row("eager, recorded by autograd: torch.add(a, b), a requires grad", torch.add,
            (a_grad, b), required=True),
        Row("eager, recorded by autograd: tilejit add(a, b) with its backward", add,
            (a_grad, b), required=True,
            note="reference: the hand-written autograd.Function below"),
        Row("eager, recorded by autograd: a hand-written autograd.Function around add",
            HandWritten.apply, (a_grad, b), required=True,
            note="what a user would write around the direct call"),
    ]


# ---- F. JAX (``--jax``) ------------------------------------------------------------------


def run_jax(calls: int = REPORT_MIN_CALLS, repeats: int = 11,
            progress=None) -> tuple[str, bool]:
    """Case F: a tilejit kernel called with JAX arrays (an XLA custom call, docs/jax.md),
    jitted and eager, next to ``jnp``'s add in the same run; and on 1M elements, the
    jitted call next to the same kernel called directly on NumPy arrays (what the handler
    adds does not grow with the size). Returns the report and whether every row ran.

    >>> report, ok = run_jax(calls=2_000, repeats=5)
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    start = time.perf_counter()
    add = _bench_add()

    def ready(fn):
        return lambda *args: fn(*args).block_until_ready()

    jit_add, jit_jnp = jax.jit(lambda x, y: add(x, y)), jax.jit(lambda x, y: x + y)
    small = (jnp.ones(N, jnp.float32), jnp.ones(N, jnp.float32))
    large = (jnp.ones(1 << 20, jnp.float32), jnp.ones(1 << 20, jnp.float32))
    large_np = tuple(np.ones(1 << 20, np.float32) for _ in range(2))
    rows = [
        Row(f"jitted: jnp add, {N} float32", ready(jit_jnp), small, required=True),
        Row(f"jitted: tilejit add, {N} float32", ready(jit_add), small, required=True,
            note="reference: the jitted jnp add"),
        Row(f"eager: jnp a + b, {N} float32", ready(jnp.add), small, required=True),
        Row(f"eager: tilejit add(a, b), {N} float32", ready(add), small, required=True,
            note="reference: jnp's eager add"),
        Row("jitted: tilejit add, 1M float32", ready(jit_add), large, required=True,
            note="reference: the direct call on NumPy arrays below"),
        Row("direct: tilejit add on NumPy arrays, 1M float32", add, large_np, required=True),
        Row("jitted: jnp add, 1M float32", ready(jit_jnp), large, required=True),
    ]
    for row in rows:  # compiled (and checked) before anything is timed
        row.fn(*row.args)
    elapsed_build = time.perf_counter() - start
    _measure(rows, calls, repeats, progress)
    references = {rows[1].name: (rows[0], "≤ 1.25×"), rows[3].name: (rows[2], ""),
                  rows[4].name: (rows[5], "")}
    table = []
    for row in rows:
        reference, target = references.get(row.name, (None, ""))
        table.append((row, (reference.median if reference else None,), target))
    lines = [*_header(calls, repeats, False, elapsed_build),
             f"jax {jax.__version__}, jaxlib {_version('jaxlib')}, {jax.default_backend()}", "",
             *_table("F. JAX: a tilejit kernel as an XLA custom call (jax.jit and eager), each "
                     "call waited for (block_until_ready)", ("× reference",), table), ""]
    return "\n".join(lines), all(row.times for row in rows)


def _progress():
    """What a long run says as it goes, on stderr: each line in place on a terminal, else
    only the estimate of how long it will take (a log keeps that)."""
    tty = sys.stderr.isatty()

    def say(line: str) -> None:
        if tty:
            print(f"\r\033[K{line}", end="" if line.startswith("repeat") else "\n",
                  file=sys.stderr, flush=True)
        elif line.startswith("timing"):
            print(line, file=sys.stderr, flush=True)

    return say


def main(args) -> int:
    """Entry point of ``python -m tilejit bench``; ``args`` has ``calls``, ``repeats`` (None:
    the defaults), ``out``, ``quick``, ``torch_compile`` and ``jax``. Returns 1 when a row tilejit is
    responsible for could not run."""
    start = time.perf_counter()
    calls, repeats = args.calls or REPORT_MIN_CALLS, args.repeats or 11
    if getattr(args, "torch_compile", False):
        report, ok = run_torch_compile(calls=calls, repeats=repeats)
    elif getattr(args, "jax", False):
        quick = args.quick and not (args.calls or args.repeats)  # under a minute
        report, ok = run_jax(calls=args.calls or (500 if quick else 20_000),
                             repeats=args.repeats or (5 if quick else 11),
                             progress=_progress())
    else:
        report, ok = run(calls=calls, repeats=repeats, quick=args.quick)
    print(report, end="")
    if args.out:
        Path(args.out).write_text(report)
    print(f"\n(bench took {time.perf_counter() - start:.1f} s)", file=sys.stderr)
    return 0 if ok else 1
