"""torch as the runtime sees it (``tilejit.runtime.frameworks.Adapter``): outputs from
``torch.empty``, torch's current CUDA stream, its lazy conjugate and negative views, the
calls it must run itself (claims), and plain words for tensors DLPack cannot describe.

Loading this module makes torch the tracer of kernel calls: ``torch.compile`` traces a
call of a kernel, of a ``@tilejit.jit`` function or of a ``jit(layout=...)`` function as
the kernel's op (``tilejit.frameworks.torch.dynamo``).
"""

from __future__ import annotations

import inspect
import threading

import torch

from ...native import abi
from ...runtime import frameworks
from ...runtime.fast_paths import FAST_PATHS
from ...runtime.fast_paths import decided as _decided
from . import dlpack, probes, versions, views
from . import native_op as _native_op
from . import op as _op

# DLPack device types with their own memory.
_CUDA_DEVICES = (abi.kDLCUDA, abi.kDLCUDAManaged)


def _static(cls: type, name: str):
    return inspect.getattr_static(cls, name, None)


_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


def _functorch_wrapped(tensor) -> bool:
    """Whether ``tensor`` is a transform's wrapper with no storage of its own (functorch's,
    or the batched gradients' vmap: ``is_grads_batched``, ``jacobian(vectorize=True)``),
    which torch's dispatcher runs through the op, slice by slice."""
    functorch = getattr(torch._C, "_functorch", None)
    test = getattr(functorch, "is_functorch_wrapped_tensor", None)
    has_storage = getattr(torch._C, "_has_storage", None)
    try:
        if test is not None and test(tensor):
            return True
        return has_storage is not None and not has_storage(tensor)
    except Exception:  # noqa: BLE001 - no answer: the import's own error stands
        return False


# What a subclass must keep of torch.Tensor's for the in-place read to say what
# __dlpack__ and its fallback (the detached alias, the strides written back) say.
_READ_AS_TENSOR = ("__dlpack__", "__torch_dispatch__", "detach", "requires_grad", "shape",
                   "stride")
# torch.Tensor's __torch_function__, or the one that turns it off (nn.Parameter's): neither
# changes what __dlpack__ returns.
_PLAIN_TORCH_FUNCTION = (_static(torch.Tensor, "__torch_function__"),
                         getattr(torch._C, "_disabled_torch_function_impl", None))


def _has_exchange_api() -> bool:
    """Whether torch's tensors publish the DLPack exchange API (torch 2.10 on), which a
    call reads them through."""
    return any(hasattr(torch.Tensor, name) for name in
               ("__dlpack_c_exchange_api__", "__c_dlpack_exchange_api__"))


class TorchAdapter(frameworks.Adapter):
    name = "torch"

    def __init__(self):
        self._lock = threading.Lock()
        self._probe: list = []  # [(offset, requires_grad, grad_enabled, meta) or None]
        self._scope: list = []  # [forward-mode AD's namespace or None], once found

    def allocator(self, dtype: str, device: tuple[int, int]):
        tdtype = getattr(torch, dtype)
        where = (torch.device("cuda", device[1]) if device[0] in _CUDA_DEVICES
                 else torch.device("cpu"))
        empty = torch.empty
        return lambda shape: empty(shape, dtype=tdtype, device=where)

    def tensor_from(self, values, dtype: str, device: str):
        return torch.from_numpy(values).to(device=device, dtype=getattr(torch, dtype))

    def device_timer(self, device: str):
        if device != "cuda":
            return None
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)

        def stop() -> float:
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3  # ms -> s

        return start.record, stop

    def device_name(self, device: str) -> str | None:
        if device != "cuda" or not torch.cuda.is_available():
            return None
        major, minor = torch.cuda.get_device_capability()
        return f"{torch.cuda.get_device_name()} sm_{major}{minor}"

    def stream(self, device_type: int, device_id: int) -> int:
        if device_type in _CUDA_DEVICES:
            return torch.cuda.current_stream(device_id).cuda_stream
        return 0

    def view_check(self, cls: type):
        """The ``tj_view_bits`` location to read the bits in place (``views.locate``);
        or, when that could not be found for this torch, ``views.lazy_view``: ask torch."""
        if not hasattr(cls, "is_neg"):
            return None
        location = views.locate() if FAST_PATHS else None
        if not FAST_PATHS:
            _decided("lazy-view bits (TensorImpl)", False, "TILEJIT_FAST_PATHS=0")
        return location if location is not None else views.lazy_view

    def lazy_view(self, obj) -> int:
        return views.lazy_view(obj)

    def reader(self, cls: type):
        """On a torch without the DLPack exchange API (2.9), the core's in-place read of
        a tensor's ``TensorImpl`` through torch's stable C ABI, as the op's C kernels
        read a tensor (``native_op.reader``: a fast path), for ``torch.Tensor`` and its
        subclasses that change nothing ``__dlpack__`` or its fallback reads; None
        elsewhere, where ``__dlpack__`` (or the exchange API) reads every tensor."""
        if (not isinstance(cls, type) or not issubclass(cls, torch.Tensor)
                or _has_exchange_api()):
            return None
        base = torch.Tensor
        if (any(_static(cls, name) is not _static(base, name) for name in _READ_AS_TENSOR)
                or _static(cls, "__torch_function__") not in _PLAIN_TORCH_FUNCTION):
            return None
        return _native_op.reader()

    def claim(self, cls: type):
        """``("always",)`` for tensor subclasses with their own ``__torch_dispatch__``
        (FakeTensor, FunctionalTensor: tensors a tracer makes, with no data a kernel
        could read) and for symbolic scalars (``torch.SymInt``, ``SymFloat``,
        ``SymBool``), else ``("ask", probe, scope, key, idle)``.

        torch claims a call when a tensor requires grad while grad mode is on (autograd
        must record it: the call runs as the kernel's custom op), when a tensor carries a
        forward-mode AD tangent, and when a tensor is one only torch can read (functorch's
        wrappers under ``torch.func`` transforms). Every call of a kernel on torch
        tensors asks, so by default the first question is answered by two C functions of
        libc10 (``probe``, see ``probes.grad_probe``) and the second only while a
        forward-AD level is open (``scope``: forward_ad's namespace, whose
        ``_current_level`` is -1 outside any). Without them (``TILEJIT_FAST_PATHS=0``, or
        a torch where they do not check out) every tensor is asked the public way,
        ``claims``: the same answers, slower.
        """
        if isinstance(cls, type) and issubclass(cls, _SYMBOLIC):
            # A symbolic scalar a tracer passes (an integer marked dynamic, one saved for
            # a backward that AOT autograd traces): the call runs as the op, whose schema
            # keeps it symbolic; reading its value would specialize the graph to it.
            return ("always",)
        if not isinstance(cls, type) or not issubclass(cls, torch.Tensor):
            return None
        base = torch.Tensor
        if (_static(cls, "__torch_dispatch__") is not _static(base, "__torch_dispatch__")
                or _static(cls, "requires_grad") is not _static(base, "requires_grad")):
            return ("always",)
        with self._lock:
            if not self._probe:
                self._probe.append(probes.grad_probe(torch) if FAST_PATHS else None)
                self._scope.append(probes.forward_ad_scope(torch) if FAST_PATHS else None)
                if not FAST_PATHS:
                    _decided("autograd claim (libc10)", False, "TILEJIT_FAST_PATHS=0")
                    _decided("forward-AD level", False, "TILEJIT_FAST_PATHS=0")
        return ("ask", self._probe[0], self._scope[0], probes.FORWARD_LEVEL,
                probes.IDLE_LEVEL)

    def grad_probe(self):
        """``probes.grad_probe``'s answer, once a claim has asked for it; else None."""
        with self._lock:
            return self._probe[0] if self._probe else None

    def forward_ad_scope(self):
        """forward_ad's namespace, whose ``_current_level`` is -1 outside a dual level,
        once a claim has checked it (``probes.forward_ad_scope``); else None."""
        with self._lock:
            return self._scope[0] if self._scope else None

    def claims(self, obj, failed: int) -> int:
        """``failed`` when the core could not import it (a functorch wrapper is run by
        torch); else whether autograd, forward or backward, must record a call with it."""
        if failed:
            return frameworks.CLAIM_NOW if _functorch_wrapped(obj) else frameworks.CLAIM_NONE
        if (obj.requires_grad and torch.is_grad_enabled()
                and not torch.is_inference_mode_enabled()):
            return frameworks.CLAIM_VALIDATED
        if torch.autograd.forward_ad.unpack_dual(obj).tangent is not None:
            return frameworks.CLAIM_VALIDATED
        return frameworks.CLAIM_NONE

    # The op runs a claimed call (one frame less than a method calling it).
    claimed_call = staticmethod(_op.claimed_call)

    def import_refusal(self, obj) -> str | None:
        """A torch tensor with no strided storage (sparse, mkldnn, nested)."""
        if getattr(obj, "is_nested", False):
            return ("expected a strided tensor, got a nested tensor, which DLPack cannot "
                    "describe; pass its components, or pad it with .to_padded_tensor(0)")
        layout = getattr(obj, "layout", torch.strided)
        if layout is torch.strided:
            return None
        return (f"expected a strided tensor, got layout {layout}, which DLPack cannot "
                "describe; convert it with .to_dense()")

    def exportable(self, obj) -> object | None:
        """A tensor that requires grad refuses ``__dlpack__``; its detached alias (the
        same storage) exports."""
        return obj.detach() if getattr(obj, "requires_grad", False) else None

    def exported(self, obj, capsule):
        """``__dlpack__``'s capsule with the tensor's own strides of size-1 dimensions, on a
        torch whose export rewrites them (``dlpack``, which decides that once)."""
        return dlpack.restore_strides(obj, capsule) if dlpack.rewrites_strides(torch) else capsule

    # What the kernel's torch-named methods run (JITKernel.torch_op, register_autograd).
    op = staticmethod(_op.torch_op)
    register_autograd = staticmethod(_op.register_autograd)
    is_compiling = staticmethod(torch.compiler.is_compiling)


ADAPTER = TorchAdapter()
versions.warn_outside(torch.__version__)

