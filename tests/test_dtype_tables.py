"""Every table of element types agrees with the one table, ``tilejit.language.dtypes``.

Other places must spell element types in their own terms (C's switch statements, the
wrapper's Cython, CUDA's typedefs, XLA's and the TMA unit's numbers, CuTe's names); each is
checked here against ``dtypes.DTYPES`` (name, DLPack code and bits, C type), through the
code that uses it wherever a call can reach it. Torch's table in ``core/src/torch.c`` is
checked against torch's own ``__dlpack__`` in ``test_torch_native.py``.
"""

from __future__ import annotations

import ctypes
import re

import pytest

import tilejit
from tilejit import T
from tilejit.builder import cdecl, cuda_compiler, signature
from tilejit.language import dtypes, lang, pointer
from tilejit.native import abi
from tilejit.native.ctypes_abi import DLDataType
from tilejit.native.library import core_library

DTYPES = list(dtypes.DTYPES.values())


def _formatted(function: str, d: dtypes.DType) -> str:
    core = core_library()
    fn = getattr(core, function)
    fn.restype, fn.argtypes = None, [DLDataType, ctypes.c_char_p, ctypes.c_int32]
    buf = ctypes.create_string_buffer(64)
    fn(DLDataType(*d.dlpack), buf, len(buf))
    return buf.value.decode()


def test_the_tables_dlpack_codes_are_the_headers():
    # dtypes.py writes DLPack's codes itself (it is the bottom of the package); the vendored
    # dlpack.h, as native/abi.py reads it, says the same.
    names = {"int": "kDLInt", "uint": "kDLUInt", "float": "kDLFloat", "bfloat": "kDLBfloat",
             "complex": "kDLComplex", "bool": "kDLBool", "float8_e4m3fn": "kDLFloat8_e4m3fn",
             "float8_e5m2": "kDLFloat8_e5m2"}
    for d in DTYPES:
        kind = d.name if d.name.startswith("float8") else d.name.rstrip("0123456789")
        assert d.code == getattr(abi, names[kind]), d.name


@pytest.mark.parametrize("d", DTYPES, ids=lambda d: d.name)
def test_the_cores_names_are_the_tables(d):
    # core/src/dtype.c names dtypes in messages; core/src/layout.c gives CuTe's names.
    assert _formatted("tj_dtype_format", d) == d.name
    assert _formatted("tj_element_type_format", d) == pointer.element_type_name(d.name)


@pytest.mark.parametrize("d", DTYPES, ids=lambda d: d.name)
def test_tilejit_arrays_have_every_dtype_of_the_table(d, backend):
    # wrapper/_array.pxi's table, read back through the core's import of the array.
    a = tilejit.empty((2, 3), d.name)
    assert a.dtype == d.name
    assert tilejit.from_dlpack(a).element_type == pointer.element_type_name(d.name)


_KINDS = {abi.kDLInt: "int", abi.kDLUInt: "int", abi.kDLFloat: "float",
          abi.kDLBfloat: "bfloat", abi.kDLComplex: "complex", abi.kDLBool: "bool"}


@pytest.mark.parametrize("d", DTYPES, ids=lambda d: d.name)
def test_a_c_type_of_the_table_reads_back_as_its_dtype(d):
    # builder/cdecl.py reads a kernel's own definition: the C type tilejit writes in a
    # prototype (the CPU prelude's typedefs) reads back as the same kind and width.
    assert cdecl._NAMED[d.c_type] == (_KINDS.get(d.code, d.name), d.bits)
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


@pytest.mark.parametrize("name", sorted(lang.TENSORMAP_DATA_TYPES))
def test_a_tensor_maps_data_type_has_the_dtypes_width(name):
    # language/lang.py picks the TMA unit's data type; builder/signature.py sizes it.
    data_type = lang.TENSORMAP_DATA_TYPES[name]
    assert signature._TENSORMAP_ELEMENT_BYTES[data_type] == dtypes.DTYPES[name].itemsize


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
