"""tilejit: run compiled kernels on torch, NumPy and DLPack tensors with minimal overhead.

>>> import tilejit
>>> from tilejit import T
>>> n = T.symbol("n")
>>> prog = tilejit.Program(name="vec_add", source=SRC, params=[
...     T.Buffer((n,), "float32", name="A"), T.Buffer((n,), "float32", name="B"),
...     T.Buffer((n,), "float32", name="C")])
>>> kernel = tilejit.compile(prog, out_idx=-1)
>>> c = kernel(a, b)
"""

from .compilation import compile
from .compiler import CompileError
from .jit import JITFunction, jit
from .kernel import JITKernel
from .lang import T
from .layout import from_dlpack
from .pointer import Pointer, make_ptr
from .program import Launch, Program
from .version import VERSION as __version__


def empty(shape, dtype="float32", device="cpu"):
    """An uninitialised host tensor of tilejit's own (``tilejit.Array``), readable zero-copy
    by ``torch.from_dlpack`` / ``numpy.from_dlpack`` and by kernels through the DLPack C
    exchange API. Needs the compiled wrapper.

    >>> a = tilejit.empty((2, 3), "float32")
    """
    from .backends.cython_backend import wrapper_module
    from .dtypes import canonical

    return wrapper_module().empty(shape, canonical(dtype), device)


__all__ = [
    "CompileError",
    "JITFunction",
    "JITKernel",
    "Launch",
    "Pointer",
    "Program",
    "T",
    "__version__",
    "compile",
    "empty",
    "from_dlpack",
    "jit",
    "make_ptr",
]
