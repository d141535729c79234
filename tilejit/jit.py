"""``tilejit.compile`` and ``@tilejit.jit``."""

from __future__ import annotations

import functools
import inspect
import os
import shlex
import sys
import threading
import time

from . import cache as _cache
from . import compiler as _compiler
from .kernel import JITKernel
from .program import Program
from .signature import host_source, lower

VERSION = "0.1.0"


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _options(target, execution_backend, compile_flags, verbose):
    """Options left None fall back to TILEJIT_* environment variables."""
    if target is None:
        target = os.environ.get("TILEJIT_TARGET", "cpu")
    if execution_backend is None:
        execution_backend = os.environ.get("TILEJIT_EXECUTION_BACKEND", "auto")
    if compile_flags is None:
        compile_flags = shlex.split(os.environ.get("TILEJIT_COMPILE_FLAGS", ""))
    elif isinstance(compile_flags, str):
        compile_flags = shlex.split(compile_flags)
    if verbose is None:
        verbose = _env_flag("TILEJIT_VERBOSE")
    return target, execution_backend, list(compile_flags), bool(verbose)


def compile(program: Program, out_idx=None, target=None, execution_backend=None,
            compile_flags=None, verbose=None, arch=None, compiler=None) -> JITKernel:
    """Compiles ``program`` (or fetches it from the disk cache) and returns a JITKernel.

    ``arch`` and ``compiler`` ("nvcc" or "nvrtc") are for ``target="cuda"``; left None
    they come from TILEJIT_CUDA_ARCH / TILEJIT_CUDA_COMPILER, the GPU and what is
    installed (see `tilejit.cuda_compiler`).

    >>> kernel = tilejit.compile(prog, out_idx=-1, target="cpu")
    >>> c = kernel(a, b)
    """
    if not isinstance(program, Program):
        raise TypeError(f"tilejit.compile expects a tilejit.Program, got "
                        f"{type(program).__name__}")
    target, execution_backend, flags, verbose = _options(target, execution_backend,
                                                         compile_flags, verbose)
    start = time.perf_counter()
    sig = lower(program, out_idx, target)
    if target == "cuda":
        from .cuda_compiler import compile_program

        path, source = compile_program(program, sig, flags, arch, compiler, verbose)
        return JITKernel(program, sig, str(path), source, execution_backend)
    if arch is not None or compiler is not None:
        raise ValueError(f"{program.name}: arch= and compiler= are for target='cuda', not "
                         f"{target!r}")
    source = host_source(program, sig)
    # Hidden visibility binds the kernel's functions inside its own library: exported, a
    # kernel named like an already loaded function (`write`, `exp`, a BLAS routine) would
    # be interposed by that one. The glue exports the packed entry explicitly. In `flags`,
    # so it is part of the cache key, and first, so the user's flags can still override it.
    flags = ["-fvisibility=hidden", *flags]
    cc = _compiler.find_cc()
    key = _cache.artifact_key(source=source, target=target, flags=flags, compiler=cc,
                              default_flags=_compiler._CPU_DEFAULT_FLAGS,
                              compiler_identity=_compiler.compiler_identity(cc),
                              tilejit=VERSION)

    def build(out_path):
        _compiler.compile_cpu(source, program.name, flags, out_path)

    path = _cache.get_or_build(key, build)
    kernel = JITKernel(program, sig, str(path), source, execution_backend)
    if verbose:
        print(f"tilejit: {program.name}: {kernel.c_prototype} -> {path} "
              f"({(time.perf_counter() - start) * 1e3:.1f} ms)", file=sys.stderr)
    return kernel


class JITFunction:
    """A program factory compiled lazily, once per canonical argument set.

    >>> @tilejit.jit(out_idx=-1)
    ... def vec_add(block: int = 256):
    ...     return tilejit.Program(...)
    >>> k = vec_add(block=128)     # compiles; vec_add(128) is the same key
    """

    def __init__(self, func, out_idx, target, execution_backend, compile_flags, verbose,
                 arch=None, compiler=None):
        self.func = func
        self._signature = inspect.signature(func)
        self._options = {"out_idx": out_idx, "target": target,
                         "execution_backend": execution_backend,
                         "compile_flags": compile_flags, "verbose": verbose, "arch": arch,
                         "compiler": compiler}
        self._kernels: dict = {}  # canonical key -> kernel
        # Exact call (args, kwargs items) -> kernel. A dict of its own: a raw key must never
        # meet a canonical one (`f(("block", 128))` is not `f(block=128)`).
        self._calls: dict = {}
        self._lock = threading.Lock()
        functools.update_wrapper(self, func)

    def _canonical_key(self, args, kwargs):
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        # The type is part of the key: 1, 1.0 and True compare equal, but a factory may
        # build a different program for each.
        key = tuple((name, type(value), value) for name, value in bound.arguments.items())
        for name, _, value in key:
            try:
                hash(value)
            except TypeError:
                raise TypeError(f"{self.func.__name__}: argument '{name}' of type "
                                f"{type(value).__name__} is unhashable; jit arguments must be "
                                "hashable (use tuples, not lists)") from None
        return key

    def __call__(self, *args, **kwargs) -> JITKernel:
        # Fast path: the exact call seen before (one dict lookup), types included as in
        # the canonical key.
        raw = (args, tuple(kwargs.items()), tuple(map(type, args)),
               tuple(map(type, kwargs.values())))
        try:
            return self._calls[raw]
        except KeyError:
            pass
        except TypeError:
            pass  # unhashable: the canonical path reports it by name
        key = self._canonical_key(args, kwargs)
        with self._lock:
            kernel = self._kernels.get(key)
            if kernel is None:
                program = self.func(*args, **kwargs)
                kernel = compile(program, **self._options)
                self._kernels[key] = kernel
            try:
                self._calls[raw] = kernel
            except TypeError:
                pass
        return kernel

    def cache_info(self) -> int:
        """Number of distinct compiled kernels held."""
        return len({id(k) for k in self._kernels.values()})


def jit(func=None, *, out_idx=None, target=None, execution_backend=None, compile_flags=None,
        verbose=None, layout=None, arch=None, compiler=None):
    """Decorator: ``@tilejit.jit`` or ``@tilejit.jit(out_idx=-1, target="cpu")``.

    ``layout="dynamic"`` is implicit conversion: the function is called with the kernel's
    tensors, receives each as a ``T.Buffer`` with a fully dynamic layout except the
    leading-dimension stride, and the call compiles (once per leading dimension, dtype
    and constant arguments) and runs the kernel; ``layout="static"`` specialises on exact
    layouts. See ``tilejit.implicit``.

    >>> @tilejit.jit(layout="dynamic")
    ... def copy(A, B):
    ...     return tilejit.Program(name="copy", params=[A, B], source=...)
    >>> copy(x, y)
    """
    if layout is not None:
        from .implicit import LayoutJITFunction

        def wrap(f):
            return LayoutJITFunction(f, layout, out_idx, target, execution_backend,
                                     compile_flags, verbose)
    else:
        def wrap(f):
            return JITFunction(f, out_idx, target, execution_backend, compile_flags, verbose,
                               arch=arch, compiler=compiler)
    return wrap(func) if func is not None else wrap
