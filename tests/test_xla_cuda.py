"""The XLA handler (core/src/xla.c) on CUDA, driven as XLA drives it, on the fake driver:
call frames laid out by hand, an FFI API table whose stream and device ordinal are this
test's, a real nvcc-compiled kernel. The launch goes to the stream XLA gives, in the
device XLA names, and a call inside a stream capture (XLA's command buffers: the handler
declares them safe) does nothing the driver forbids there. JAX's CPU build cannot run a
CUDA program here; a GPU, when lent, runs tests/test_jax.py's calls for real."""

from __future__ import annotations

import ctypes
from ctypes import CFUNCTYPE, POINTER, c_int32, c_int64, c_void_p

import pytest
from conftest import load_fakes

import tilejit
from tilejit import T
from tilejit.native import abi
from tilejit.native.ctypes_abi import (
    TjXlaApi,
    TjXlaApiVersion,
    TjXlaAttrs,
    TjXlaBuffer,
    TjXlaByteSpan,
    TjXlaCallFrame,
    TjXlaDeviceOrdinalGetArgs,
    TjXlaErrorCreateArgs,
    TjXlaList,
    TjXlaStreamGetArgs,
)
from tilejit.native.library import core_library
from tilejit.tools.demo import CUDA_VEC_ADD

fakes = load_fakes()
STREAM = 0x5EED
F32 = 11  # XLA's F32


@pytest.fixture(scope="module")
def vec_add(driver):
    n = T.symbol("n")
    program = tilejit.Program("vec_add", [T.Buffer((n,), "float32", name="A", const=True),
                                          T.Buffer((n,), "float32", name="B", const=True),
                                          T.Buffer((n,), "float32", name="C")],
                              CUDA_VEC_ADD, grid=(T.ceildiv(n, 256),), block=(256,))
    kernel = tilejit.compile(program, out_idx=-1, target="cuda", compiler="nvcc")
    core = core_library()
    core.tj_xla_register.restype = c_int32
    core.tj_xla_register.argtypes = [ctypes.c_char_p, c_void_p, c_int32]
    assert core.tj_xla_register(kernel.jax_target.encode(), kernel._core_kernel.address,
                                abi.kDLCUDA) == 0
    return kernel


class _Xla:
    """An FFI API table of this test's: the stream and device ordinal it hands out, and
    the errors the handler made (their messages)."""

    def __init__(self, device: int):
        self.errors, self.device = [], device

        @CFUNCTYPE(c_void_p, POINTER(TjXlaErrorCreateArgs))
        def error_create(args):
            self.errors.append(args.contents.message.decode())
            return 1

        @CFUNCTYPE(c_void_p, POINTER(TjXlaStreamGetArgs))
        def stream_get(args):
            args.contents.stream = STREAM

        @CFUNCTYPE(c_void_p, POINTER(TjXlaDeviceOrdinalGetArgs))
        def device_ordinal_get(args):
            args.contents.device_ordinal = self.device

        self._keep = (error_create, stream_get, device_ordinal_get)
        self.api = TjXlaApi(struct_size=ctypes.sizeof(TjXlaApi),
                            api_version=TjXlaApiVersion(ctypes.sizeof(TjXlaApiVersion)),
                            error_create=ctypes.cast(error_create, c_void_p),
                            stream_get=ctypes.cast(stream_get, c_void_p),
                            device_ordinal_get=ctypes.cast(device_ordinal_get, c_void_p))


def _frame(xla: _Xla, target: str, addresses: list[int], n: int):
    """A call frame of vec_add on device buffers at ``addresses`` (A, B, then C)."""
    dims = (c_int64 * 1)(n)
    buffers = [TjXlaBuffer(ctypes.sizeof(TjXlaBuffer), None, F32, a, 1, dims)
               for a in addresses]
    pointers = [ctypes.addressof(b) for b in buffers]
    names = [TjXlaByteSpan(b"tilejit", 7), TjXlaByteSpan(b"tilejit_inputs", 14)]
    values = [TjXlaByteSpan(target.encode(), len(target)), TjXlaByteSpan(b"bb", 2)]
    keep = (dims, buffers, names, values)
    frame = TjXlaCallFrame(
        struct_size=ctypes.sizeof(TjXlaCallFrame), api=ctypes.addressof(xla.api), stage=3,
        args=TjXlaList(ctypes.sizeof(TjXlaList), None, 2, (c_int32 * 2)(1, 1),
                       (c_void_p * 2)(*pointers[:2])),
        rets=TjXlaList(ctypes.sizeof(TjXlaList), None, 1, (c_int32 * 1)(1),
                       (c_void_p * 1)(pointers[2])),
        attrs=TjXlaAttrs(ctypes.sizeof(TjXlaAttrs), None, 2, (c_int32 * 2)(4, 4),
                         (POINTER(TjXlaByteSpan) * 2)(*map(ctypes.pointer, names)),
                         (c_void_p * 2)(*map(ctypes.addressof, values))))
    frame._keep = keep
    return frame


def _handler():
    core = core_library()
    core.tj_xla_handler.restype = c_void_p
    core.tj_xla_handler.argtypes = [POINTER(TjXlaCallFrame)]
    return core.tj_xla_handler


def test_the_handler_launches_on_the_stream_xla_gives(fake, vec_add):
    xla = _Xla(device=1)
    a, b, c = (fakes.FakeCudaTensor((1000,)).address for _ in range(3))
    frame = _frame(xla, vec_add.jax_target, [a, b, c], 1000)
    assert _handler()(ctypes.byref(frame)) is None, xla.errors
    (launch,) = fake.launches()
    assert launch["stream"] == STREAM
    assert launch["grid"] == [4, 1, 1] and launch["function"] == "vec_add"
    assert launch["args"][:3] == [v.to_bytes(8, "little").hex() for v in (a, b, c)]
    assert launch["context"] == 1  # the device XLA named: its primary context


def test_a_call_in_a_capture_does_nothing_forbidden(fake, vec_add):
    xla = _Xla(device=0)
    buffers = [fakes.FakeCudaTensor((512,)).address for _ in range(3)]
    frame = _frame(xla, vec_add.jax_target, buffers, 512)
    assert _handler()(ctypes.byref(frame)) is None  # loads the module, outside the capture
    fake.reset()
    fake.begin_capture(STREAM)
    for _ in range(2):
        assert _handler()(ctypes.byref(frame)) is None, xla.errors
    assert fake.end_capture(STREAM) == 0
    assert fake.forbidden() == 0
    assert [launch.get("captured") for launch in fake.launches()] == [1, 1]


def test_a_refused_call_is_an_xla_error_with_the_cores_message(fake, vec_add):
    xla = _Xla(device=0)
    buffers = [fakes.FakeCudaTensor((64,)).address for _ in range(3)]
    frame = _frame(xla, vec_add.jax_target, buffers, 64)
    frame.args.size = 1
    assert _handler()(ctypes.byref(frame)) is not None
    assert xla.errors == ["vec_add: argument 1 'B': the call has 1 buffer operands"]
    assert fake.launches() == []
