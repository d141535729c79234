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
_INT, _UINT, _FLOAT, _BFLOAT, _COMPLEX, _BOOL = 0, 1, 2, 4, 5, 6
_F8_E4M3FN, _F8_E5M2 = 10, 12


class DType(NamedTuple):
    name: str
    code: int
    bits: int
    c_type: str  # as written in generated prototypes (prelude typedefs included)

    @property
    def dlpack(self) -> tuple[int, int, int]:
        return (self.code, self.bits, 1)

    @property
    def itemsize(self) -> int:
        return max(self.bits // 8, 1)


_TABLE = [
    DType("bool", _BOOL, 8, "bool"),
    DType("int8", _INT, 8, "int8_t"),
    DType("int16", _INT, 16, "int16_t"),
    DType("int32", _INT, 32, "int32_t"),
    DType("int64", _INT, 64, "int64_t"),
    DType("uint8", _UINT, 8, "uint8_t"),
    DType("uint16", _UINT, 16, "uint16_t"),
    DType("uint32", _UINT, 32, "uint32_t"),
    DType("uint64", _UINT, 64, "uint64_t"),
    DType("float16", _FLOAT, 16, "tj_float16"),
    DType("bfloat16", _BFLOAT, 16, "tj_bfloat16"),
    DType("float32", _FLOAT, 32, "float"),
    DType("float64", _FLOAT, 64, "double"),
    DType("float8_e4m3fn", _F8_E4M3FN, 8, "tj_float8_e4m3fn"),
    DType("float8_e5m2", _F8_E5M2, 8, "tj_float8_e5m2"),
    DType("complex64", _COMPLEX, 64, "tj_complex64"),
    DType("complex128", _COMPLEX, 128, "tj_complex128"),
]
DTYPES: dict[str, DType] = {d.name: d for d in _TABLE}

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
