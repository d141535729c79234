"""The C core as a shared library, through ctypes: loading it, the ctypes binding's one
check function, and building a core kernel from a lowered signature.

Every backend's kernel is built here, once, from ``Signature.spec``: the Cython binding
attaches to the same ``tj_kernel`` (it links the same shared core), the ctypes backend
calls it directly.
"""

from __future__ import annotations

import builtins
import ctypes
import threading
from ctypes import (
    POINTER,
    byref,
    c_char_p,
    c_int,
    c_int32,
    c_int64,
    c_uint32,
    c_uint64,
    c_void_p,
    string_at,
)

from . import abi
from ._build import build_tools
from .ctypes_abi import (
    DLDataType,
    DLDevice,
    TjAbiArg,
    TjExportArg,
    TjExportFunction,
    TjExportLoad,
    TjExprInfo,
    TjLaunchInfo,
    TjParamInfo,
    TjSymbolInfo,
    TjTensorMap,
    TjXlaCallFrame,
    TorchOp,
)

_lock = threading.Lock()
_core = None  # ctypes.CDLL: calls drop the GIL (none of them reaches Python)


def core_library() -> ctypes.CDLL:
    """The core (built and cached on first use), with prototypes set."""
    global _core
    with _lock:
        if _core is None:
            # Rebuilt once if the loader rejects the cached file (build_tools.core_build).
            _, lib = build_tools.load_core_library()
            for name, (restype, argtypes) in _PROTOTYPES.items():
                fn = getattr(lib, name)
                fn.restype, fn.argtypes = restype, argtypes
            _core = lib
    return _core


def core_loaded() -> bool:
    """Whether this process has loaded the core already."""
    return _core is not None


_PROTOTYPES = {
    "tj_host_bound_layout": (None, [ctypes.c_ssize_t]),
    # torch.h (the torch wing's: tilejit/frameworks/torch/native_op.py)
    "tj_torch_init": (c_int, []),
    "tj_torch_impl": (c_int, [c_void_p, POINTER(TorchOp)]),
    "tj_torch_tls_word": (c_int, [c_char_p, POINTER(c_uint64)]),
    "tj_torch_read_object": (c_int, [c_void_p, c_void_p, c_void_p]),
    # xla.h (the JAX adapter's: tilejit/frameworks/jax.py)
    "tj_xla_register": (c_int32, [c_char_p, c_void_p, c_int32]),
    "tj_xla_bind": (c_int32, [POINTER(TjXlaCallFrame), DLDevice, POINTER(c_int32),
                              POINTER(c_int64), POINTER(DLDataType)]),
    "tj_last_error": (c_char_p, []),
    "tj_status_exception": (c_char_p, [c_int]),
    "tj_kernel_create": (c_int, [c_char_p, c_int32, c_int32, POINTER(c_void_p)]),
    "tj_kernel_free": (None, [c_void_p]),
    "tj_kernel_add_symbol": (c_int, [c_void_p, c_char_p, c_int64]),
    "tj_kernel_set_symbol_dtype": (c_int, [c_void_p, c_int32, DLDataType]),
    "tj_kernel_set_abi": (c_int, [c_void_p, c_int32, POINTER(TjAbiArg)]),
    "tj_kernel_load_prebuilt": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, c_char_p]),
    "tj_kernel_add_expr": (c_int, [c_void_p, POINTER(c_int64), c_int32, c_char_p,
                                   POINTER(c_int32)]),
    "tj_kernel_set_buffer": (c_int, [c_void_p, c_int32, c_char_p, DLDataType, c_int32,
                                     POINTER(c_int32), POINTER(c_int32), c_int64, c_uint32]),
    "tj_kernel_set_scalar": (c_int, [c_void_p, c_int32, c_char_p, DLDataType]),
    "tj_kernel_set_scalar_symbol": (c_int, [c_void_p, c_int32, c_int32]),
    "tj_kernel_set_pointer": (c_int, [c_void_p, c_int32, c_char_p, DLDataType, c_int64,
                                      c_uint32]),
    "tj_kernel_set_launch": (c_int, [c_void_p, POINTER(c_int32), POINTER(c_int32), c_int32]),
    "tj_kernel_add_launch": (c_int, [c_void_p, c_char_p, POINTER(c_int32), POINTER(c_int32),
                                     c_int32, c_int32, POINTER(TjAbiArg), POINTER(c_int32)]),
    "tj_kernel_set_launch_attrs": (c_int, [c_void_p, c_int32, POINTER(c_int32), c_uint32]),
    "tj_kernel_add_tensormap": (c_int, [c_void_p, POINTER(TjTensorMap), POINTER(c_int32)]),
    "tj_kernel_finalize": (c_int, [c_void_p]),
    "tj_kernel_load": (c_int, [c_void_p, c_char_p, c_char_p]),
    "tj_kernel_num_outputs": (c_int32, [c_void_p]),
    "tj_kernel_num_workspaces": (c_int32, [c_void_p]),
    "tj_kernel_num_params": (c_int32, [c_void_p]),
    "tj_kernel_param_name": (c_char_p, [c_void_p, c_int32]),
    "tj_kernel_output_param": (c_int32, [c_void_p, c_int32]),
    "tj_kernel_name": (c_char_p, [c_void_p]),
    "tj_kernel_open": (c_int, [c_char_p, POINTER(c_void_p)]),
    "tj_kernel_reopen": (c_int, [c_void_p, POINTER(c_void_p)]),
    "tj_kernel_export_num_files": (c_int32, [c_void_p]),
    "tj_kernel_export_file": (c_int, [c_void_p, c_int32, POINTER(c_char_p), POINTER(c_void_p),
                                      POINTER(c_int64), POINTER(c_char_p)]),
    "tj_kernel_export_arch": (c_char_p, [c_void_p]),
    "tj_kernel_target": (c_int32, [c_void_p]),
    "tj_kernel_num_symbols": (c_int32, [c_void_p]),
    "tj_kernel_num_exprs": (c_int32, [c_void_p]),
    "tj_kernel_num_launches": (c_int32, [c_void_p]),
    "tj_kernel_num_tensormaps": (c_int32, [c_void_p]),
    "tj_kernel_symbol_info": (c_int, [c_void_p, c_int32, POINTER(TjSymbolInfo)]),
    "tj_kernel_expr_info": (c_int, [c_void_p, c_int32, POINTER(TjExprInfo)]),
    "tj_kernel_param_info": (c_int, [c_void_p, c_int32, POINTER(TjParamInfo)]),
    "tj_kernel_abi_info": (c_int, [c_void_p, POINTER(c_int32), POINTER(POINTER(TjAbiArg))]),
    "tj_kernel_launch_info": (c_int, [c_void_p, c_int32, POINTER(TjLaunchInfo)]),
    "tj_kernel_tensormap_info": (c_int, [c_void_p, c_int32, POINTER(POINTER(TjTensorMap))]),
    "tj_kernel_export_out_idx": (c_int, [c_void_p, POINTER(c_int32), POINTER(POINTER(c_int32))]),
    "tj_kernel_export_num_functions": (c_int32, [c_void_p]),
    "tj_kernel_export_function": (c_int, [c_void_p, c_int32, POINTER(TjExportFunction)]),
    "tj_kernel_export_load": (c_int, [c_void_p, POINTER(TjExportLoad)]),
    "tj_cuda_device_capability": (c_int, [c_int32, POINTER(c_int32), POINTER(c_int32)]),
    "tj_kernel_warmup": (c_int, [c_void_p, c_int32]),
    "tj_producer_from_exchange": (c_int, [c_void_p, c_void_p, c_void_p]),
    "tj_host_method_install": (None, [c_void_p]),
    "tj_host_dlpack_producer": (None, [c_void_p, c_void_p, c_void_p]),
    "tj_host_ask_view": (None, [c_void_p]),
}
_classes: dict = {}


def exception_class(rc: int) -> type:
    """The exception class the core's status table names for a code."""
    cls = _classes.get(rc)
    if cls is None:
        name = core_library().tj_status_exception(rc).decode()
        cls = _classes[rc] = getattr(builtins, name, RuntimeError) if name else RuntimeError
    return cls


def status_of(exc: BaseException) -> int:
    """The core's status for an exception: the first failed code whose class in the
    core's status table ``exc`` is an instance of, else ``TJ_ERUNTIME`` (the inverse of
    ``exception_class``, for a host that hands a Python failure back to the core)."""
    for rc, name in sorted(abi.STATUS_EXCEPTIONS.items(), reverse=True):
        if rc < 0 and name not in ("", "RuntimeError") and isinstance(exc, exception_class(rc)):
            return rc
    return abi.TJ_ERUNTIME


def check(rc: int) -> None:
    """Raises the exception for a failed core status of a kernel's build."""
    if rc:
        raise exception_class(rc)(_core.tj_last_error().decode("utf-8", "replace"))


def cuda_device_capability(device_id: int = -1) -> tuple[int, int]:
    """``(major, minor)`` of CUDA device ``device_id`` (-1: the current context's device,
    else 0); RuntimeError when there is no driver or no such device."""
    core = core_library()
    major, minor = c_int32(), c_int32()
    check(core.tj_cuda_device_capability(device_id, byref(major), byref(minor)))
    return major.value, minor.value


_INT64 = (abi.kDLInt, 64, 1)


def _text(value: bytes) -> str:
    return value.decode("utf-8")  # the core keeps UTF-8 only (open.c refuses other bytes)


def _triple(dtype) -> tuple[int, int, int]:
    return (dtype.code, dtype.bits, dtype.lanes)


def _export_arg(a: TjExportArg) -> tuple:
    return (_text(a.name), a.source, a.index, _text(a.dtype), bool(a.pointer), bool(a.is_const),
            a.param)


def _abi_entries(args, n: int) -> tuple:
    return tuple((a.source, a.index, _triple(a.dtype)) for a in args[:n])


def _abi_array(entries):
    return (TjAbiArg * max(len(entries), 1))(
        *(TjAbiArg(a.source, a.index, DLDataType(*a.dtype)) for a in entries))


class CoreKernel:
    """A finalized, loaded ``tj_kernel`` built from a lowered signature (``spec``: see
    ``tilejit.builder.signature``); freed when the last backend kernel using it goes."""

    export_files = None  # opened from an export (open): {name: (bytes, sha256)} as checked
    export_arch = None

    def __init__(self, spec, library: str, entry: str, prebuilt=None):
        core = core_library()
        params = spec.params
        handle = c_void_p()
        check(core.tj_kernel_create(spec.name.encode(), len(params), spec.target, byref(handle)))
        self.address = handle.value
        self.name = spec.name
        for index, (sym_name, divisibility, dtype) in enumerate(spec.symbols):
            check(core.tj_kernel_add_symbol(handle, sym_name.encode(), divisibility))
            if dtype != _INT64:
                check(core.tj_kernel_set_symbol_dtype(handle, index, DLDataType(*dtype)))
        expr_id = c_int32()
        for code, text in spec.exprs:
            buf = (c_int64 * max(len(code), 1))(*code)
            check(core.tj_kernel_add_expr(handle, buf, len(code) // 2, text.encode(),
                                          byref(expr_id)))
        for index, p in enumerate(params):
            dtype = DLDataType(*p.dtype)
            bname = p.name.encode()
            if p.kind == abi.TJ_PARAM_SCALAR:
                check(core.tj_kernel_set_scalar(handle, index, bname, dtype))
                if p.binds >= 0:
                    check(core.tj_kernel_set_scalar_symbol(handle, index, p.binds))
            elif p.kind == abi.TJ_PARAM_POINTER:
                check(core.tj_kernel_set_pointer(handle, index, bname, dtype, p.align, p.flags))
            else:
                shape = (c_int32 * max(len(p.shape), 1))(*p.shape)
                strides = None if p.strides is None else \
                    (c_int32 * max(len(p.strides), 1))(*p.strides)
                check(core.tj_kernel_set_buffer(handle, index, bname, dtype, len(p.shape),
                                                shape, strides, p.align, p.flags))
        for m in spec.tensormaps:
            rank = len(m.dims)
            fields = TjTensorMap(m.name.encode(), m.param, m.data_type, rank, (*m.dims,),
                                 (*m.strides,), (*m.box,), (*m.element_strides,), m.interleave,
                                 m.swizzle, m.l2_promotion, m.oob_fill)
            if m.im2col is not None:
                lower, upper, fields.channels_per_pixel, fields.pixels_per_column = m.im2col
                fields.im2col = 1
                fields.lower_corner[:len(lower)] = lower
                fields.upper_corner[:len(upper)] = upper
            check(core.tj_kernel_add_tensormap(handle, byref(fields), byref(expr_id)))
        if spec.abi is not None:
            check(core.tj_kernel_set_abi(handle, len(spec.abi), _abi_array(spec.abi)))
        for index, launch in enumerate(spec.launches):  # CUDA: kernel functions in order
            grid, block = (c_int32 * 3)(*launch.grid), (c_int32 * 3)(*launch.block)
            if index == 0:
                check(core.tj_kernel_set_launch(handle, grid, block, launch.shared_memory))
            else:
                check(core.tj_kernel_add_launch(handle, launch.symbol.encode(), grid, block,
                                                launch.shared_memory, len(launch.abi),
                                                _abi_array(launch.abi), byref(expr_id)))
            if launch.cluster is not None or launch.flags:
                cluster = None if launch.cluster is None else (c_int32 * 3)(*launch.cluster)
                check(core.tj_kernel_set_launch_attrs(handle, index, cluster, launch.flags))
        check(core.tj_kernel_finalize(handle))
        self._read_params()
        if prebuilt is not None:  # a CPU library built elsewhere, called through the glue
            check(core.tj_kernel_load_prebuilt(handle, library.encode(), entry.encode(),
                                               str(prebuilt).encode(), spec.name.encode()))
        elif library:
            check(core.tj_kernel_load(handle, library.encode(), entry.encode()))

    @classmethod
    def open(cls, directory) -> CoreKernel:
        """The kernel exported to ``directory``, as the core opens it (``tj_kernel_open``:
        every file checked, the signature replayed, the image loaded)."""
        core = core_library()
        handle = c_void_p()
        check(core.tj_kernel_open(str(directory).encode(), byref(handle)))
        return cls._opened(handle)

    def reopen(self) -> CoreKernel:
        """Another core kernel built from the files this one was opened from, as they were
        checked then (``tj_kernel_reopen``): nothing is read from the directory again."""
        handle = c_void_p()
        check(_core.tj_kernel_reopen(self.address, byref(handle)))
        return CoreKernel._opened(handle)

    @classmethod
    def _opened(cls, handle: c_void_p) -> CoreKernel:
        core = _core
        self = cls.__new__(cls)
        self.address = handle.value
        self.name = core.tj_kernel_name(handle).decode()
        self._read_params()
        # The export's files as the core read and checked them: {name: (bytes, sha256)}.
        self.export_files = {}
        name, data, size, digest = c_char_p(), c_void_p(), c_int64(), c_char_p()
        for i in range(core.tj_kernel_export_num_files(handle)):
            check(core.tj_kernel_export_file(handle, i, byref(name), byref(data), byref(size),
                                             byref(digest)))
            self.export_files[name.value.decode()] = (string_at(data.value, size.value),
                                                      digest.value.decode())
        self.export_arch = core.tj_kernel_export_arch(handle).decode()
        return self

    def declared(self) -> dict:
        """What the kernel's builder calls declared, as the core keeps it
        (``tj_kernel_*_info``): ``target``, ``symbols``, ``exprs``, ``params``, ``abi``,
        ``launches`` and ``tensormaps``, each as plain tuples in the field order of
        ``tilejit.builder.signature``'s ``CoreSpec`` parts (``None`` for an ``abi`` never
        declared, and for a launch's absent ``cluster`` or a tiled map's ``im2col``)."""
        core, handle = _core, self.address
        symbol, expr, param = TjSymbolInfo(), TjExprInfo(), TjParamInfo()
        symbols, exprs, params = [], [], []
        for i in range(core.tj_kernel_num_symbols(handle)):
            check(core.tj_kernel_symbol_info(handle, i, byref(symbol)))
            symbols.append((_text(symbol.name), symbol.divisibility, _triple(symbol.dtype)))
        for i in range(core.tj_kernel_num_exprs(handle)):
            check(core.tj_kernel_expr_info(handle, i, byref(expr)))
            exprs.append((tuple(expr.code[:2 * expr.n]), _text(expr.text)))
        for i in range(core.tj_kernel_num_params(handle)):
            check(core.tj_kernel_param_info(handle, i, byref(param)))
            strides = tuple(param.strides[:param.ndim]) if param.strides else None
            params.append((param.kind, _text(param.name), _triple(param.dtype),
                           tuple(param.shape[:param.ndim]) if param.shape else (), strides,
                           param.align, param.flags, param.symbol))
        nabi, abi_args = c_int32(), POINTER(TjAbiArg)()
        check(core.tj_kernel_abi_info(handle, byref(nabi), byref(abi_args)))
        return {"target": core.tj_kernel_target(handle), "symbols": symbols, "exprs": exprs,
                "params": params,
                "abi": None if nabi.value < 0 else _abi_entries(abi_args, nabi.value),
                "launches": self._launches(), "tensormaps": self._tensormaps()}

    def _launches(self) -> list:
        core, handle, info, launches = _core, self.address, TjLaunchInfo(), []
        for i in range(core.tj_kernel_num_launches(handle)):
            check(core.tj_kernel_launch_info(handle, i, byref(info)))
            launches.append((_text(info.symbol), tuple(info.grid), tuple(info.block),
                             info.shared_mem, _abi_entries(info.args, info.nargs),
                             tuple(info.cluster[:3]) if info.cluster else None, info.flags))
        return launches

    def _tensormaps(self) -> list:
        core, handle, maps = _core, self.address, []
        found = POINTER(TjTensorMap)()
        for i in range(core.tj_kernel_num_tensormaps(handle)):
            check(core.tj_kernel_tensormap_info(handle, i, byref(found)))
            m = found.contents
            rank = m.rank
            im2col = None
            if m.im2col:
                im2col = (tuple(m.lower_corner[:rank - 2]), tuple(m.upper_corner[:rank - 2]),
                          m.channels_per_pixel, m.pixels_per_column)
            maps.append((_text(m.name), m.param, m.data_type, tuple(m.dims[:rank]),
                         tuple(m.strides[:rank - 1]), () if m.im2col else tuple(m.box[:rank]),
                         tuple(m.element_strides[:rank]), m.interleave, m.swizzle,
                         m.l2_promotion, m.oob_fill, im2col))
        return maps

    def export_said(self) -> dict:
        """What the export this kernel was opened from says beyond the builder calls, as
        the core read and checked it (``tj_kernel_export_*``): ``out_idx`` (parameter
        indices in return order; ``None`` without an out_idx line), ``functions`` (``(name,
        prototype, args)``, each arg ``(name, source, index, dtype name, pointer, const,
        param or -1)``) and ``load`` (``image``, ``entry``, ``library``, ``symbol``; the
        last two ``None`` but for a prebuilt library)."""
        core, handle = _core, self.address
        n, out_idx = c_int32(), POINTER(c_int32)()
        check(core.tj_kernel_export_out_idx(handle, byref(n), byref(out_idx)))
        functions, function = [], TjExportFunction()
        for i in range(core.tj_kernel_export_num_functions(handle)):
            check(core.tj_kernel_export_function(handle, i, byref(function)))
            args = [_export_arg(a) for a in function.args[:function.nargs]]
            functions.append((_text(function.name), _text(function.prototype), args))
        load = TjExportLoad()
        check(core.tj_kernel_export_load(handle, byref(load)))
        return {"out_idx": None if n.value < 0 else tuple(out_idx[:n.value]),
                "functions": functions,
                "load": {field: None if getattr(load, field) is None
                         else _text(getattr(load, field))
                         for field in ("image", "entry", "library", "symbol")}}

    def _read_params(self) -> None:
        core, handle = _core, self.address
        noutputs = core.tj_kernel_num_outputs(handle)
        allocated = [core.tj_kernel_output_param(handle, i)  # outputs, then workspaces
                     for i in range(noutputs + core.tj_kernel_num_workspaces(handle))]
        nparams = core.tj_kernel_num_params(handle)
        self.num_outputs = noutputs
        # The output parameters in declaration order: the order the core returns them in.
        self.output_params = tuple(allocated[:noutputs])
        self.num_inputs = nparams - len(allocated)
        self.input_names = tuple(core.tj_kernel_param_name(handle, i).decode()
                                 for i in range(nparams) if i not in allocated)

    def warmup(self, device: int = -1) -> None:
        """Loads a CUDA kernel's module ahead of its first launch (``tj_kernel_warmup``):
        into device ``device``'s context, or with -1 into the thread's current context;
        RuntimeError without a driver. Nothing to do for a CPU kernel."""
        check(_core.tj_kernel_warmup(self.address, device))

    def __del__(self):
        if getattr(self, "address", None) and _core is not None:
            _core.tj_kernel_free(self.address)
            self.address = None


