"""``tilejit.compile``: a Program to a JITKernel, through the compiler drivers and the
artifact cache; ``tilejit.load``: an export (``tilejit.export``) to a JITKernel; and
``CompileOptions``, the one record of the options ``compile`` and ``@tilejit.jit`` take
(plain or ``layout=``)."""

from __future__ import annotations

import contextvars
import dataclasses
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from ..builder import artifact as _artifact
from ..builder import cache as _cache
from ..builder import compiler as _compiler
from ..builder import glue as _glue
from ..builder.compiler import CompileError
from ..builder.signature import lower
from ..language.program import Program
from ..native._build import elf as _elf
from ..native._build import env as _env
from ..native.library import CoreKernel
from ..version import VERSION
from . import backends as _backends
from . import frameworks
from .kernel import JITKernel

__all__ = ["CompileErrors", "CompileOptions", "compile", "compile_artifacts", "compile_many",
           "load"]


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """The options of ``tilejit.compile``, as ``@tilejit.jit`` keeps them for every kernel
    it compiles. Options left None fall back to the environment at compile time (see
    ``compile``).

    >>> opts = CompileOptions(out_idx=-1, target="cuda", arch="sm_90", compiler="nvrtc")
    >>> kernel = tilejit.compile(prog, **opts.as_kwargs())
    """

    out_idx: Any = None
    target: str | None = None
    execution_backend: str | None = None
    compile_flags: Any = None
    verbose: bool | None = None
    arch: Any = None
    compiler: str | None = None

    def as_kwargs(self) -> dict[str, Any]:
        """The options as keyword arguments of ``tilejit.compile``."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}


def _options(target, execution_backend, compile_flags, verbose, where="tilejit.compile"):
    """Options left None fall back to TILEJIT_* environment variables. ``where`` names
    the kernel (or the call) in a refusal."""
    if target is None:
        target = _env.choice("TILEJIT_TARGET", ("cpu", "cuda")) or "cpu"
    if execution_backend is None:
        execution_backend = _env.choice("TILEJIT_EXECUTION_BACKEND",
                                        ("auto", "cython", "dlpack", "ctypes")) or "auto"
    if compile_flags is None:
        compile_flags = _env.command("TILEJIT_COMPILE_FLAGS")
    elif isinstance(compile_flags, str):
        compile_flags = shlex.split(compile_flags)
    if verbose is None:
        verbose = _env.flag("TILEJIT_VERBOSE")
    try:
        flags = list(compile_flags)
    except TypeError:
        raise TypeError(f"{where}: compile_flags must be a list of strings (or one string), "
                        f"got {type(compile_flags).__name__} {compile_flags!r}") from None
    for flag in flags:
        if not isinstance(flag, str):
            raise TypeError(f"{where}: compile_flags must be strings, got "
                            f"{type(flag).__name__} {flag!r} in {flags!r}")
    return target, execution_backend, flags, bool(verbose)


def compile(program: Program, out_idx=None, target=None, execution_backend=None,
            compile_flags=None, verbose=None, arch=None, compiler=None) -> JITKernel:
    """Compiles ``program`` (or fetches it from the disk cache) and returns a JITKernel.

    ``arch`` and ``compiler`` ("nvcc" or "nvrtc") are for ``target="cuda"``; left None
    they come from TILEJIT_CUDA_ARCH / TILEJIT_CUDA_COMPILER, the GPU and what is
    installed (see `tilejit.builder.cuda_compiler`).

    >>> kernel = tilejit.compile(prog, out_idx=-1, target="cpu")
    >>> c = kernel(a, b)
    """
    if not isinstance(program, Program):
        raise TypeError(f"tilejit.compile expects a tilejit.Program, got "
                        f"{type(program).__name__}")
    target, execution_backend, flags, verbose = _options(target, execution_backend,
                                                         compile_flags, verbose, program.name)
    start = time.perf_counter()
    sig = lower(program, out_idx, target)
    if target == "cuda":
        return _compile_cuda(program, sig, execution_backend, flags, verbose, arch, compiler)
    if arch is not None or compiler is not None:
        raise ValueError(f"{program.name}: arch= and compiler= are for target='cuda', not "
                         f"{target!r}")
    return _compile_cpu(program, sig, target, execution_backend, flags, verbose, start)


def _compile_cuda(program: Program, sig, execution_backend: str, flags: list, verbose: bool,
                  arch, compiler) -> JITKernel:
    """A CUDA kernel: its image compiled (or found in the cache), or its prebuilt binary
    loaded as it is."""
    from ..builder.cuda_compiler import compile_program, load_binary, resolve_arch

    if program.binary is not None:
        if arch is not None or compiler is not None:
            raise ValueError(f"{program.name}: arch= and compiler= compile a source; "
                             "a prebuilt binary= is loaded as it is")
        path = load_binary(program, sig)
        return JITKernel(_artifact.built(program, sig, str(path)), execution_backend)
    source = None

    def cuda_image():
        nonlocal source
        path, source = compile_program(program, sig, flags, arch, compiler, verbose)
        return path

    return _load_built(cuda_image, lambda path: JITKernel(_artifact.built(
        program, sig, str(path), source,
        cuda_arch=",".join(resolve_arch(arch))),  # what kernel.export records
        execution_backend))


def _compile_cpu(program: Program, sig, target: str, execution_backend: str, flags: list,
                 verbose: bool, start: float) -> JITKernel:
    """A CPU kernel: its source and glue compiled by the system compiler into the cache
    (or found there; ``verbose`` says which, timed from ``start``); without a compiler,
    found by its portable key."""
    language = program.language_for(target, flags)
    if language == "cuda":
        raise ValueError(f"{program.name}: language='cuda' is for target='cuda'")
    # Hidden visibility binds the kernel's functions inside its own library: exported, a
    # kernel named like an already loaded function (`write`, `exp`, a BLAS routine) would
    # be interposed by that one. The glue exports the packed entry explicitly. In `flags`,
    # so it is part of the cache key, and first, so the user's flags can still override it.
    flags = ["-fvisibility=hidden", *flags]
    prebuilt = None
    if program.binary is not None:
        prebuilt = _stored_binary(program)
        source, language = _glue.prebuilt_glue_source(program, sig), "c"
    else:
        source = _glue.host_source(program, sig, language)
    defaults = _compiler.default_flags(language)
    # The key without the compiler: how a machine with no compiler finds kernels that
    # one with a compiler cached (a deployed image, a copied cache).
    portable = _cache.artifact_key(kind="portable", source=source, target=target, flags=flags,
                                   default_flags=defaults, tilejit=VERSION)
    try:
        cc = _compiler.find_cxx() if language == "c++" else _compiler.find_cc()
        identity = _compiler.compiler_identity(cc)
    except CompileError as exc:
        found = _cache.find_portable(portable)
        if found is None:
            raise CompileError(program.name, reason=f"{exc.reason or exc}; and no kernel compiled "
                               "from this source is in the cache") from None
        return JITKernel(_artifact.built(program, sig, str(found), source, prebuilt),
                         execution_backend)
    # `-march=native` is keyed by what this compiler makes of it on this CPU: machines of
    # one CPU share such a kernel (locally, remotely, from an executor's worker), others
    # never meet it.
    native = _compiler.native_resolution(cc, flags)
    key = _cache.artifact_key(source=source, target=target, flags=flags, compiler=cc,
                              default_flags=defaults, compiler_identity=identity,
                              tilejit=VERSION, **({"native": native} if native else {}))

    def build(out_path):
        _compiler.compile_cpu(source, program.name, flags, out_path, cc=cc, language=language)

    info = {"name": program.name, "target": target, "arch": platform.machine(),
            "portable_key": portable}
    kernel = _load_built(
        lambda: _cache.get_or_build(key, build, check=_elf.problem, info=info,  # whole
                                    shared=native != "unresolved", verbose=verbose),
        lambda path: JITKernel(_artifact.built(program, sig, str(path), source, prebuilt),
                               execution_backend))
    if verbose and kernel is not None:
        print(f"tilejit: {program.name}: {kernel.c_prototype} -> {kernel.library_path} "
              f"({(time.perf_counter() - start) * 1e3:.1f} ms)", file=sys.stderr)
    return kernel


# Set while `compile_artifacts` runs: compiles find or build their artifact and stop there
# (a worker compiling for another process loads nothing).
_build_only: contextvars.ContextVar = contextvars.ContextVar("tilejit_build_only",
                                                             default=False)


def _load_built(find, load):
    """``load(find())``: a kernel from its cache entry. Another process may remove the
    entry (``python -m tilejit cache prune``, ``TILEJIT_CACHE_MAX_SIZE``) between the two;
    then it is found, that is built, again, once. Under ``compile_artifacts``: ``find()``
    only, and None."""
    path = find()
    if _build_only.get():
        return None
    try:
        return load(path)
    except (OSError, RuntimeError, ValueError):
        if os.path.exists(path):
            raise
    return load(find())


def _stored_binary(program: Program):
    """A prebuilt CPU library, copied into the artifact cache under its content hash: the
    kernel loads that copy, which no later change to the user's file can alter."""
    data = program.binary_bytes()
    if not data.startswith(b"\x7fELF"):
        raise ValueError(f"{program.name}: binary= for target='cpu' must be a shared library "
                         f"(ELF), got {len(data)} bytes starting {data[:8]!r}")
    problem = _elf.problem_in(data)
    if problem is not None:
        raise ValueError(f"{program.name}: binary= for target='cpu' is no whole shared "
                         f"library: {problem}")
    return _cache.store_bytes(data, info={"name": program.name, "target": "cpu",
                                          "arch": platform.machine()}, tilejit=VERSION)


def load(path, execution_backend: str = "auto"):
    """The kernel exported to ``path``, behind ``execution_backend``: it behaves as the
    kernel that was exported (results, checks and messages, outputs, streams,
    ``with_backend``, ``torch_op``). Nothing is compiled and the module that built the
    kernel is not imported. The core opens the directory first (``tj_kernel_open``),
    reading each file once: a damaged, foreign or unrunnable export is a ValueError
    naming the directory, the file and what is wrong. An export replaced meanwhile by
    another process loads old or new, whole (docs/export.md)."""
    from ..builder import export as _export  # a CPU start that loads nothing skips it

    directory = Path(os.fspath(path)).absolute()
    _export.adopt_core(directory)
    core_kernel = CoreKernel.open(directory)
    # Everything from here comes from the files as the core read and checked them
    # (core_kernel.export_files); later changes at the path cannot reach the kernel.
    loaded = _export.Loaded(directory, core_kernel)
    kernel = JITKernel(loaded.artifact(), execution_backend, core_kernel=core_kernel)
    # Registered for jax.export-ed programs that call it: now, or once JAX is imported.
    frameworks.publish(kernel)
    return kernel


# ---- Compiling for another process -------------------------------------------------------


def compile_artifacts(program: Program, options: dict) -> list:
    """What an executor's worker runs (``tilejit.runtime.executors``): ``program``
    compiled through this process's cache with ``options`` (``resolved_options`` of the
    caller), without loading it. Returns the ``tilejit.builder.cache.Artifact`` records
    (key, file name, bytes, SHA-256) the caller installs in its own cache
    (``cache.supplied_artifacts``) before it compiles the same program, which then finds
    them instead of compiling."""
    with _cache.capture_artifacts() as found:
        token = _build_only.set(True)
        try:
            compile(program, **options)
        finally:
            _build_only.reset(token)
    return found


def resolved_options(compile_options: dict, where: str) -> dict:
    """``compile_options`` with what this process's environment decides filled in (the
    target, flags, verbosity, CUDA architectures and compiler), so that another process
    compiles exactly what this one would. ``where`` names the caller in a refusal."""
    options = dict(compile_options)
    target, backend, flags, verbose = _options(options.get("target"),
                                               options.get("execution_backend"),
                                               options.get("compile_flags"),
                                               options.get("verbose"), where)
    options.update(target=target, execution_backend=backend, compile_flags=flags,
                   verbose=verbose)
    if target == "cuda":
        from ..builder.cuda_compiler import resolve_arch, resolve_compiler

        options["arch"] = list(resolve_arch(options.get("arch")))
        options["compiler"] = resolve_compiler(options.get("compiler"))
    return options


# ---- Many kernels at once -----------------------------------------------------------------

try:
    _ErrorGroup = ExceptionGroup  # a builtin from Python 3.11 on
except NameError:  # Python 3.9, 3.10
    _ErrorGroup = Exception


class CompileErrors(_ErrorGroup):
    """Some programs of a ``compile_many`` failed. ``exceptions`` holds each failure (its
    ``CompileError`` or other exception), ``failed`` the ``(index, program name)`` of each,
    and ``kernels`` every result in input order, ``None`` where it failed. An
    ``ExceptionGroup`` from Python 3.11 on (``except*`` works)."""

    def __new__(cls, message, exceptions, failed=(), kernels=()):
        if _ErrorGroup is Exception:
            self = Exception.__new__(cls, message)
        else:
            self = super().__new__(cls, message, exceptions)
        self.failed, self.kernels = list(failed), list(kernels)
        return self

    def __init__(self, message, exceptions, failed=(), kernels=()):
        if _ErrorGroup is Exception:
            super().__init__(message)
            self.exceptions = tuple(exceptions)
        else:
            super().__init__(message, exceptions)

    def derive(self, exceptions):
        return CompileErrors(self.message, exceptions, self.failed, self.kernels)

    @property
    def message(self) -> str:
        return self.args[0]


class _Progress:
    """A progress bar on stderr: tqdm's when it is installed, else one line rewritten."""

    def __init__(self, total: int, show):
        if show is None:
            show = sys.stderr.isatty()
        self.total, self.done, self.bar, self.show = total, 0, None, bool(show) and total > 0
        if self.show:
            try:
                from tqdm import tqdm
            except ImportError:
                self._line()
            else:
                self.bar = tqdm(total=total, desc="tilejit: compiling", unit="kernel",
                                file=sys.stderr)

    def _line(self) -> None:
        end = "\n" if self.done == self.total else ""
        print(f"\rtilejit: compiled {self.done}/{self.total}", end=end, file=sys.stderr,
              flush=True)

    def step(self) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
        elif self.show:
            self._line()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def compile_many(programs, *, workers=None, progress=None, executor=None,
                 **compile_options) -> list:
    """Compiles ``programs`` (each as ``tilejit.compile(program, **compile_options)``) on
    ``workers`` threads (default: the machine's cores; compilers run as processes, so
    threads compile in parallel) and returns the kernels in input order.

    ``executor``: compile on other processes or machines instead: a
    ``concurrent.futures.Executor`` (``ProcessPoolExecutor``, Dask's
    ``client.get_executor()``), a ``dask.distributed.Client``, or ``"ray"`` (after
    ``ray.init()``). Each worker compiles into its own cache and sends the artifact back;
    this process checks it, installs it in its cache and loads it (``workers`` threads
    wait and install). An artifact built with another compiler or for another CPU is not
    installed: that program is compiled here (see ``tilejit.runtime.executors``).

    A program that fails does not stop the others: once all have finished,
    ``CompileErrors`` (an ``ExceptionGroup``) names every failed program with its
    compiler's message; the kernels that compiled are in the cache, and in its
    ``kernels``. ``progress=True`` shows a progress bar on stderr (tqdm's when installed),
    ``None`` only when stderr is a terminal, ``False`` never.

    >>> kernels = tilejit.compile_many([prog_a, prog_b], out_idx=-1, workers=2)
    >>> kernels = tilejit.compile_many(programs, out_idx=-1, executor=client)  # Dask
    """
    from concurrent.futures import ThreadPoolExecutor, as_completed

    from . import executors as _executors

    programs = list(programs)
    if workers is None:
        workers = os.cpu_count() or 1
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"compile_many: workers must be an int >= 1, got {workers!r}")
    for i, program in enumerate(programs):
        if not isinstance(program, Program):
            raise TypeError(f"compile_many: programs[{i}] must be a tilejit.Program, got "
                            f"{type(program).__name__}")
    engine = None if executor is None else _executors.engine(executor, "compile_many")
    # The wrapper is built (or found) once, here, rather than by every worker at once.
    _, backend, _, _ = _options(compile_options.get("target"),
                                compile_options.get("execution_backend"), None, False)
    _backends.resolve(backend)
    kernels: list = [None] * len(programs)
    failures: dict = {}
    bar = _Progress(len(programs), progress)
    if engine is None:
        def task(i):
            return compile(programs[i], **compile_options)
    else:
        task = _remote_tasks(engine, programs, compile_options)
    try:
        with ThreadPoolExecutor(max_workers=min(workers, max(len(programs), 1))) as pool:
            futures = {pool.submit(task, i): i for i in range(len(programs))}
            for future in as_completed(futures):
                i = futures[future]
                try:
                    kernels[i] = future.result()
                except Exception as exc:  # noqa: BLE001 - reported together below
                    failures[i] = exc
                bar.step()
    finally:
        bar.close()
    if failures:
        order = sorted(failures)
        lines = [f"  programs[{i}] {programs[i].name}: {type(failures[i]).__name__}: "
                 f"{str(failures[i]).strip()}" for i in order]
        raise CompileErrors(f"compile_many: {len(order)} of {len(programs)} programs failed "
                            "to compile:\n" + "\n".join(lines),
                            [failures[i] for i in order],
                            [(i, programs[i].name) for i in order], kernels)
    return kernels


def _remote_tasks(engine, programs: list, compile_options: dict):
    """Sends every program to ``engine``'s workers now; returns the task that waits for
    program ``i``'s artifacts and compiles it here with them supplied."""
    from . import executors as _executors

    handles: dict = {}
    verbose = False
    try:  # once for every program: each worker compiles what this process would
        options = resolved_options(compile_options, "compile_many")
        verbose = options["verbose"]
    except Exception:  # noqa: BLE001 - unresolvable here: every compile here says why
        _executors._count("worker_failures")
        options = None
    for i, program in enumerate(programs):
        if options is None or program.binary is not None:
            continue  # a binary has nothing to compile: it is stored and loaded here
        try:
            handles[i] = engine.submit(compile_artifacts, program, options)
            _executors._count("sent")
        except Exception:  # noqa: BLE001 - a program that cannot be sent compiles here
            _executors._count("worker_failures")

    def task(i):
        program = programs[i]
        if i not in handles:
            return compile(program, **compile_options)
        try:
            artifacts = engine.result(handles[i])
        except Exception as exc:
            if _executors.genuine_failure(exc):
                raise
            _executors._count("worker_failures")
            _executors._count("compiled_here")
            if verbose:
                print(f"tilejit: {program.name}: the {engine.name} worker failed ("
                      f"{type(exc).__name__}: {str(exc).strip()[:200]}); compiling here",
                      file=sys.stderr)
            return compile(program, **compile_options)
        with _cache.supplied_artifacts(artifacts) as supplied:
            kernel = compile(program, **compile_options)
        _executors._count("installed", len(supplied["installed"]))
        if supplied["built"]:
            _executors._count("compiled_here")
            if verbose:
                print(f"tilejit: {program.name}: the {engine.name} worker's build is not "
                      "this machine's (another compiler or CPU); compiled here",
                      file=sys.stderr)
        return kernel

    return task
