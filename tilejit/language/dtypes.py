"""Element types: one table from tilejit's names to DLPack codes, C types and
framework dtypes.

>>> canonical("float32"), canonical(numpy.float32)
('float32', 'float32')
"""

from __future__ import annotations

from typing import NamedTuple

# DLPack's type codes (DLDataTypeCode, dlpack.h), part of DLPack's stable ABI. Written
# here so that this table stands alone, at the bottom of the package; the core's header
# is checked to say the same (tests/test_dtype_tables.py).
_INT, _UINT, _FLOAT, _HANDLE, _BFLOAT, _COMPLEX, _BOOL = 0, 1, 2, 3, 4, 5, 6
(_F8_E3M4, _F8_E4M3, _F8_E4M3B11FNUZ, _F8_E4M3FN, _F8_E4M3FNUZ, _F8_E5M2, _F8_E5M2FNUZ,
 _F8_E8M0FNU, _F6_E2M3FN, _F6_E3M2FN, _F4_E2M1FN) = range(7, 18)


class DType(NamedTuple):
    """An element type, as every table of tilejit's spells it. The fields up to `torch`
    are the columns of the core's table (``TJ_DTYPES`` in ``core/include/tilejit/core.h``,
    which says what each means; ``tests/test_dtype_tables.py`` holds the two together);
    the rest are Python's own."""

    name: str
    code: int
    bits: int
    lanes: int
    family: str  # the core's name of the DLPack code ("float"; "uint" for uint8)
    cute: str | None  # CuTe's name of the code ("Float"), width added as for `family`
    tma: int  # CUtensorMapDataType, -1: none
    xla: int  # XLA's PrimitiveType, 0: none
    torch: str | None  # torch's name (torch.float32; the core's aoti_torch_dtype_*)
    # A kernel's parameters may have this type when it has a C spelling: as written in
    # generated prototypes (prelude typedefs included), None for a type the core only
    # names; the other C spellings of it that a kernel's definition may use; and for CUDA,
    # the header and type the prelude's `typedef` of a tj_ spelling names.
    c_type: str | None = None
    c_names: tuple[str, ...] = ()
    cuda: tuple[str | None, str] | None = None

    @property
    def dlpack(self) -> tuple[int, int, int]:
        return (self.code, self.bits, self.lanes)

    @property
    def itemsize(self) -> int:
        return max(self.bits // 8, 1)

    @property
    def c_kind(self) -> str:
        """How a kernel's C definition classes the type: its family, unsigned integers
        as integers (only the width is checked)."""
        return "int" if self.family == "uint" else self.family

    @property
    def element_type(self) -> str:
        """CuTe's name (``"Float16"``), or tilejit's where CuTe has none."""
        if self.cute is None:
            return self.name
        return self.cute + (str(self.bits) if self.name != self.family else "")


_F16_C = ("half", "__half", "half_t", "_Float16", "__fp16", "float16_t")
_BF16_C = ("__nv_bfloat16", "nv_bfloat16", "bfloat16_t", "bfloat16", "__bf16")
_ALL = [
    DType("bool", _BOOL, 8, 1, "bool", "Boolean", 0, 1, "bool", "bool", ("_Bool",)),
    DType("int8", _INT, 8, 1, "int", "Int", 0, 2, "int8", "int8_t"),
    DType("int16", _INT, 16, 1, "int", "Int", 1, 3, "int16", "int16_t"),
    DType("int32", _INT, 32, 1, "int", "Int", 3, 4, "int32", "int32_t"),
    DType("int64", _INT, 64, 1, "int", "Int", 5, 5, "int64", "int64_t"),
    DType("uint8", _UINT, 8, 1, "uint", "Uint", 0, 6, "uint8", "uint8_t"),
    DType("uint16", _UINT, 16, 1, "uint", "Uint", 1, 7, "uint16", "uint16_t"),
    DType("uint32", _UINT, 32, 1, "uint", "Uint", 2, 8, "uint32", "uint32_t"),
    DType("uint64", _UINT, 64, 1, "uint", "Uint", 4, 9, "uint64", "uint64_t"),
    DType("float16", _FLOAT, 16, 1, "float", "Float", 6, 10, "float16", "tj_float16", _F16_C,
          ("cuda_fp16.h", "__half")),
    DType("bfloat16", _BFLOAT, 16, 1, "bfloat", "BFloat", 9, 16, "bfloat16", "tj_bfloat16",
          _BF16_C, ("cuda_bf16.h", "__nv_bfloat16")),
    DType("float32", _FLOAT, 32, 1, "float", "Float", 7, 11, "float32", "float"),
    DType("float64", _FLOAT, 64, 1, "float", "Float", 8, 12, "float64", "double"),
    DType("float8_e4m3fn", _F8_E4M3FN, 8, 1, "float8_e4m3fn", "Float8E4M3FN", 0, 20,
          "float8_e4m3fn", "tj_float8_e4m3fn", ("__nv_fp8_e4m3", "fp8_e4_t", "float_e4m3_t"),
          ("cuda_fp8.h", "__nv_fp8_e4m3")),
    DType("float8_e5m2", _F8_E5M2, 8, 1, "float8_e5m2", "Float8E5M2", 0, 19, "float8_e5m2",
          "tj_float8_e5m2", ("__nv_fp8_e5m2", "fp8_e5_t", "float_e5m2_t"),
          ("cuda_fp8.h", "__nv_fp8_e5m2")),
    DType("complex64", _COMPLEX, 64, 1, "complex", "Complex", -1, 15, "complex64",
          "tj_complex64", ("float2", "cuFloatComplex", "cuComplex"), (None, "float2")),
    DType("complex128", _COMPLEX, 128, 1, "complex", "Complex", -1, 18, "complex128",
          "tj_complex128", ("double2", "cuDoubleComplex"), (None, "double2")),
    DType("complex32", _COMPLEX, 32, 1, "complex", "Complex", -1, 0, "complex32"),
    DType("float8_e3m4", _F8_E3M4, 8, 1, "float8_e3m4", None, -1, 29, None),
    DType("float8_e4m3", _F8_E4M3, 8, 1, "float8_e4m3", "Float8E4M3", -1, 28, None),
    DType("float8_e4m3b11fnuz", _F8_E4M3B11FNUZ, 8, 1, "float8_e4m3b11fnuz", None, -1, 23,
          None),
    DType("float8_e4m3fnuz", _F8_E4M3FNUZ, 8, 1, "float8_e4m3fnuz", "Float8E4M3FNUZ", -1, 25,
          "float8_e4m3fnuz"),
    DType("float8_e5m2fnuz", _F8_E5M2FNUZ, 8, 1, "float8_e5m2fnuz", "Float8E5M2FNUZ", -1, 24,
          "float8_e5m2fnuz"),
    DType("float8_e8m0fnu", _F8_E8M0FNU, 8, 1, "float8_e8m0fnu", "Float8E8M0FNU", -1, 33,
          "float8_e8m0fnu"),
    DType("float6_e2m3fn", _F6_E2M3FN, 6, 1, "float6_e2m3fn", "Float6E2M3FN", -1, 0, None),
    DType("float6_e3m2fn", _F6_E3M2FN, 6, 1, "float6_e3m2fn", "Float6E3M2FN", -1, 0, None),
    DType("float4_e2m1fn", _F4_E2M1FN, 4, 2, "float4_e2m1fn", "Float4E2M1FN", -1, 0,
          "float4_e2m1fn_x2"),
    DType("handle", _HANDLE, 64, 1, "handle", None, -1, 0, None),
]
#: Every element type the core names, in the core's order.
ALL: dict[str, DType] = {d.name: d for d in _ALL}
#: The element types a kernel's parameters may have: those with a C spelling.
DTYPES: dict[str, DType] = {d.name: d for d in _ALL if d.c_type is not None}

#: Bytes per element of each CUtensorMapDataType, uint8 (0) to tfloat32_ftz (12); the
#: core's TJ_TENSORMAP_ELEMENT_BYTES.
TENSORMAP_ELEMENT_BYTES = (1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4)

_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "int": "int32",
            "long": "int64", "bool_": "bool", "float8_e4m3": "float8_e4m3fn"}


def canonical(dtype: object) -> str:
    """The tilejit name of a dtype given as a string, a torch dtype or a NumPy dtype.

    >>> canonical("float32")
    'float32'
    """
    if isinstance(dtype, str):
        name = dtype
    else:
        # torch.float32 prints "torch.float32"; numpy types have a .name or __name__.
        text = str(dtype)
        if text.startswith("torch."):
            name = text[len("torch."):]
        elif hasattr(dtype, "name") and isinstance(dtype.name, str):
            name = dtype.name
        elif isinstance(dtype, type) and hasattr(dtype, "__name__"):
            name = dtype.__name__
        else:
            name = text
    name = _ALIASES.get(name, name)
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    return name


def get(dtype: object) -> DType:
    """The DType record of any accepted dtype spelling."""
    return DTYPES[canonical(dtype)]


# Typedefs every generated CPU source starts with, so prototypes can name the
# types that C spells differently across compilers.
C_PRELUDE = """\
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#if defined(__FLT16_MANT_DIG__)
typedef _Float16 tj_float16;
#else
typedef uint16_t tj_float16;
#endif
typedef uint16_t tj_bfloat16;
typedef uint8_t tj_float8_e4m3fn;
typedef uint8_t tj_float8_e5m2;
typedef float _Complex tj_complex64;
typedef double _Complex tj_complex128;
"""
