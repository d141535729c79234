"""The element-type table of each language, held together: the core's (``TJ_DTYPES`` in
``core/include/tilejit/core.h``, which dtype.c, layout.c, xla.c and torch.c expand) and
Python's (``tilejit.language.dtypes``, which every other Python table and the wrapper's
derive from), row by row; then each use of them a call reaches. Torch's column is also
checked against torch's own ``__dlpack__`` in ``test_torch_native.py``.
"""

from __future__ import annotations

import ctypes
import re

import pytest

import tilejit
from tilejit import T
from tilejit.builder import cuda_compiler, signature
from tilejit.language import dtypes, lang, pointer
from tilejit.native.ctypes_abi import DLDataType
from tilejit.native.library import core_library

DTYPES = list(dtypes.DTYPES.values())


class _Row(ctypes.Structure):  # tj_dtype_row
    _fields_ = [("name", ctypes.c_char_p), ("dtype", DLDataType), ("family", ctypes.c_char_p),
                ("cute", ctypes.c_char_p), ("tma", ctypes.c_int32), ("xla", ctypes.c_int32),
                ("torch", ctypes.c_char_p)]


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


def test_the_cores_table_is_pythons_row_by_row():
    core = core_library()
    core.tj_dtype_rows.restype = ctypes.POINTER(_Row)
    core.tj_dtype_rows.argtypes = [ctypes.POINTER(ctypes.c_int32)]
    count = ctypes.c_int32()
    rows = core.tj_dtype_rows(ctypes.byref(count))
    in_c = [(_text(r.name), r.dtype.code, r.dtype.bits, r.dtype.lanes, _text(r.family),
             _text(r.cute), r.tma, r.xla, _text(r.torch)) for r in rows[:count.value]]
    in_python = [tuple(d)[:9] for d in dtypes.ALL.values()]  # the core's columns
    assert in_c == in_python
    core.tj_tensormap_element_bytes.restype = ctypes.c_int64
    core.tj_tensormap_element_bytes.argtypes = [ctypes.c_int32]
    widths = [core.tj_tensormap_element_bytes(t) for t in range(-1, 15)]
    assert widths == [0, *dtypes.TENSORMAP_ELEMENT_BYTES, 0, 0]
    for d in dtypes.ALL.values():  # a TMA type has the element type's width
        assert d.tma < 0 or dtypes.TENSORMAP_ELEMENT_BYTES[d.tma] == d.itemsize, d.name


def _formatted(function: str, d: dtypes.DType) -> str:
    core = core_library()
    fn = getattr(core, function)
    fn.restype, fn.argtypes = None, [DLDataType, ctypes.c_char_p, ctypes.c_int32]
    buf = ctypes.create_string_buffer(64)
    fn(DLDataType(*d.dlpack), buf, len(buf))
    return buf.value.decode()


@pytest.mark.parametrize("d", dtypes.ALL.values(), ids=lambda d: d.name)
def test_the_cores_names_are_the_tables(d):
    # core/src/dtype.c names dtypes in messages; core/src/layout.c gives CuTe's names.
    lanes = f"x{d.lanes}" if d.lanes != 1 else ""
    assert _formatted("tj_dtype_format", d) == d.name + lanes
    assert _formatted("tj_element_type_format", d) == d.element_type + lanes
    if d.name in dtypes.DTYPES:
        assert pointer.element_type_name(d.name) == d.element_type


@pytest.mark.parametrize("d", DTYPES, ids=lambda d: d.name)
def test_tilejit_arrays_have_every_dtype_of_the_table(d, backend):
    # wrapper/_array.pxi's table, read back through the core's import of the array.
    a = tilejit.empty((2, 3), d.name)
    assert a.dtype == d.name
    assert tilejit.from_dlpack(a).element_type == pointer.element_type_name(d.name)


@pytest.mark.parametrize("d", DTYPES, ids=lambda d: d.name)
def test_the_cpu_prelude_defines_every_c_type_of_the_table(d):
    # The C type tilejit writes in a prototype is C's own or one of the prelude's typedefs.
    assert re.search(rf"\b{d.c_type}\b", dtypes.C_PRELUDE) or d.c_type in (
        "bool", "float", "double") or d.c_type.endswith("_t")


def test_cuda_sources_get_a_typedef_for_every_c_type_of_the_table():
    program = tilejit.Program("k", [T.Buffer((4,), d.name, name=f"p{i}")
                                    for i, d in enumerate(DTYPES)],
                              "__global__ void k(" + ", ".join(
                                  f"{d.c_type} *p{i}" for i, d in enumerate(DTYPES)) + ") {}",
                              grid=(1,), block=(1,))
    prelude = cuda_compiler.cuda_source(program, signature.lower(program, [], "cuda"))
    for d in DTYPES:
        if d.c_type.startswith("tj_"):
            assert re.search(rf"typedef [\w ]+ {d.c_type};", prelude), d.name


def test_tensor_maps_take_the_tables_tma_types():
    # language/lang.py picks the TMA unit's data type from the table; builder/signature.py
    # sizes it with the table's widths.
    assert lang.TENSORMAP_DATA_TYPES == {d.name: d.tma for d in DTYPES if d.tma >= 0}
    assert signature._TENSORMAP_ELEMENT_BYTES == dtypes.TENSORMAP_ELEMENT_BYTES


def test_the_jax_table_names_every_dtype_jax_and_the_core_share():
    # frameworks/jax.py numbers an array's dtype as XLA does; core/src/xla.c reads that
    # number back as a DLPack dtype at trace time: a kernel taking float32 refuses every
    # other dtype naming it as the table does.
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import numpy

    from tilejit.frameworks import jax as tj_jax

    n = T.symbol("n")
    k = tilejit.compile(tilejit.Program(
        name="copy_f32", source="void copy_f32(const float *a, float *b, int64_t n) "
                                "{ for (int64_t i = 0; i < n; ++i) b[i] = a[i]; }",
        params=[T.Buffer((n,), "float32", name="a"), T.Buffer((n,), "float32", name="b")]),
        out_idx=1)
    checked = 0
    x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)  # int64 and float64 operands as they are
    try:
        checked = _refused_by_name(jax, jnp, numpy, tj_jax, k)
    finally:
        jax.config.update("jax_enable_x64", x64)
    assert checked == len(DTYPES) - 1


def _refused_by_name(jax, jnp, numpy, tj_jax, k) -> int:
    checked = 0
    for name in tj_jax._XLA_TYPES:
        try:
            dtype = jnp.dtype(name)
        except TypeError:
            continue  # a dtype this jax lacks
        if name not in dtypes.DTYPES:
            continue
        assert numpy.dtype(dtype).name == name
        spec = jax.ShapeDtypeStruct((4,), dtype)
        if name == "float32":
            jax.jit(k).lower(spec)
            continue
        with pytest.raises(ValueError, match=rf"expected dtype float32, got {name}(\n|$)"):
            jax.jit(k).lower(spec)
        checked += 1
    return checked
