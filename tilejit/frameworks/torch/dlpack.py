"""torch's ``__dlpack__`` export, made to say what the tensor says.

torch releases without the DLPack exchange API (2.9, the oldest tilejit supports) are read
through ``__dlpack__`` alone, and their export rewrites the stride of every dimension of
size 1 to 1 (and, in a tensor with such a dimension, of a dimension of size 0): a
``(1, 4)`` view with strides ``(100, 1)`` is exported as ``(1, 1)``. The
memory it describes is the same, but a kernel that binds that stride to a symbol would see
1 on those releases and 100 on newer ones (whose exchange API exports the tensor's own
strides), and a signature with a constant stride would be refused on one and accepted on
the other. So the export is checked once per process (``rewrites_strides``) and, where it
rewrites, the tensor's own strides of its size-1 dimensions are written back into the
exported ``DLTensor`` (``restore_strides``): the capsule is the consumer's until it calls
the deleter, and on such a release its strides array is that of the private view the
export made with the rewritten strides (held by the capsule), never the tensor's own. A
stride is written only where it differs from the tensor's, of a dimension whose size the
export states as the tensor has it.
"""

from __future__ import annotations

import ctypes
import threading

from ...native.ctypes_abi import DLManagedTensor, DLManagedTensorVersioned
from ...runtime.fast_paths import in_fresh_thread

_name = ctypes.pythonapi.PyCapsule_GetName
_name.restype, _name.argtypes = ctypes.c_char_p, [ctypes.py_object]
_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_pointer.restype, _pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
_MANAGED = {b"dltensor_versioned": DLManagedTensorVersioned, b"dltensor": DLManagedTensor}

_lock = threading.Lock()
_decided: list = []  # [whether this torch's __dlpack__ rewrites size-1 strides]


def _dltensor(capsule):
    """The ``DLTensor`` of an unconsumed DLPack capsule, or None for another capsule."""
    name = _name(capsule)
    managed = _MANAGED.get(name)
    if managed is None:
        return None
    return managed.from_address(_pointer(capsule, name)).dl_tensor


def described(capsule) -> tuple | None:
    """What an unconsumed DLPack capsule says, as plain values: ``(data, byte_offset,
    (device_type, device_id), ndim, (code, bits, lanes), shape, strides, flags)``
    (strides None when the capsule states none; flags 0 for a legacy capsule); None for
    another capsule. For comparing another reading of a tensor with ``__dlpack__``'s."""
    name = _name(capsule)
    managed = _MANAGED.get(name)
    if managed is None:
        return None
    tensor = managed.from_address(_pointer(capsule, name))
    dl = tensor.dl_tensor
    flags = getattr(tensor, "flags", 0)
    return (*fields(dl), flags)


def fields(dl) -> tuple:
    """A ``DLTensor``'s fields as plain values (``described`` without the flags)."""
    ndim = dl.ndim
    shape = tuple(dl.shape[:ndim]) if ndim > 0 else ()
    # A 0-d tensor has no stride to state, whether the pointer is NULL or not.
    strides = () if ndim <= 0 else tuple(dl.strides[:ndim]) if dl.strides else None
    return (dl.data or 0, dl.byte_offset, (dl.device.device_type, dl.device.device_id), ndim,
            (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes), shape, strides)


def restore_strides(tensor, capsule):
    """``capsule`` (``tensor.__dlpack__()``'s) with the tensor's own strides of its
    dimensions of size 1 (and of size 0, which torch 2.9 rewrites beside them) written
    back where the export changed them."""
    shape = tensor.shape
    if 1 not in shape and 0 not in shape:
        return capsule
    dl = _dltensor(capsule)
    if dl is None or not dl.strides or dl.ndim != len(shape):
        return capsule
    for i, (size, stride) in enumerate(zip(shape, tensor.stride())):
        if size <= 1 and dl.shape[i] == size and dl.strides[i] != stride:
            dl.strides[i] = stride
    return capsule


def rewrites_strides(torch) -> bool:
    """Whether this torch's ``__dlpack__`` exports a size-1 dimension's stride other than
    the tensor's: decided once, on a CPU ``(1, 4)`` view with strides ``(100, 1)``, on a
    thread of its own (the caller's default device or modes do not reach it); False when
    the export cannot be made or read."""
    if not _decided:
        with _lock:
            if not _decided:
                def probe() -> bool:
                    view = torch.zeros(3, 100, device="cpu")[:1, :4]
                    capsule = view.__dlpack__()  # kept alive while its DLTensor is read
                    dl = _dltensor(capsule)
                    return dl is not None and bool(dl.strides) and dl.strides[0] != 100

                try:
                    found = in_fresh_thread(probe)
                except Exception:  # noqa: BLE001 - no export to look at: nothing to correct
                    found = False
                _decided.append(found)
    return _decided[0]
