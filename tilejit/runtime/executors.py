"""Compiling on an engine people already run: ``executor=`` of ``tilejit.compile_many`` and
``@tilejit.autotune``.

An executor is a ``concurrent.futures.Executor`` (a ``ProcessPoolExecutor``, Dask's
``client.get_executor()``), a ``dask.distributed.Client``, or ``"ray"`` (Ray tasks, in the
Ray instance ``ray.init()`` started or joined). Each program goes to a worker as the
program and the options this process resolved (target, flags, CUDA architectures,
compiler), so the worker compiles what this process would. The worker compiles through
its own cache and sends back the artifact, never a loaded kernel: the file's bytes, their
SHA-256 and the cache key it computed (``compilation.compile_artifacts``, with the
options of ``compilation.resolved_options``). This process
then compiles the same program under ``cache.supplied_artifacts``: its cache, missing the
key, installs the worker's bytes after checking them (the hash, a whole shared library)
instead of compiling. The key holds the compiler, its version and what ``-march=native``
means to it, so the bytes of a worker with another toolchain or another CPU are never
installed: their key is not this process's, and the program is compiled here.

A worker that fails for want of something (no compiler, a lost worker, a program that
cannot be sent) costs a compile here; a compiler that rejected the source is that
program's failure, as in a local compile.
"""

from __future__ import annotations

import concurrent.futures
import threading

from ..builder.compiler import CompileError

__all__ = ["Engine", "engine", "genuine_failure", "stats"]

_stats_lock = threading.Lock()
_stats = {"sent": 0, "installed": 0, "compiled_here": 0, "worker_failures": 0}


def _count(what: str, n: int = 1) -> None:
    with _stats_lock:
        _stats[what] += n


def stats() -> dict[str, int]:
    """This process's compiles through executors: programs ``sent`` to workers, artifacts
    ``installed`` from them, programs ``compiled_here`` after all (a worker's artifact that
    was not this machine's, or a worker that failed), ``worker_failures``."""
    with _stats_lock:
        return dict(_stats)


def reset() -> None:
    """Forget the counts, as a new process would (for tests)."""
    with _stats_lock:
        _stats.update(dict.fromkeys(_stats, 0))


class Engine:
    """One executor as tilejit uses it: ``submit(fn, *args)`` returns a handle,
    ``result(handle)`` waits for it and returns ``fn``'s result or raises its exception."""

    def __init__(self, name: str, submit, result):
        self.name, self._submit, self._result = name, submit, result

    def submit(self, fn, *args):
        return self._submit(fn, *args)

    def result(self, handle):
        return self._result(handle)


def engine(executor, where: str) -> Engine:
    """The ``Engine`` of what a user passed as ``executor=``; ``TypeError`` naming
    ``where`` (the function it was passed to) and what is accepted, ``ImportError`` for
    ``"ray"`` without Ray."""
    if isinstance(executor, str):
        if executor != "ray":
            raise ValueError(f"{where}: executor must be a concurrent.futures.Executor, a "
                             f"dask.distributed.Client or \"ray\", got the string {executor!r}")
        try:
            import ray
        except ImportError:
            raise ImportError(f"{where}: executor=\"ray\" needs Ray: pip install "
                              "\"tilejit[ray]\"") from None
        remote_functions: dict = {}

        def submit_ray(fn, *args):
            remote = remote_functions.get(fn)
            if remote is None:
                remote = remote_functions[fn] = ray.remote(fn)
            return remote.remote(*args)

        return Engine("ray", submit_ray, ray.get)
    if isinstance(executor, concurrent.futures.Executor):
        return Engine(type(executor).__name__, executor.submit,
                      lambda future: future.result())
    if _is_dask_client(executor):
        return Engine("dask", lambda fn, *args: executor.submit(fn, *args, pure=False),
                      lambda future: future.result())
    raise TypeError(f"{where}: executor must be a concurrent.futures.Executor (a "
                    "ProcessPoolExecutor, Dask's client.get_executor()), a "
                    f"dask.distributed.Client or \"ray\", got {type(executor).__name__} "
                    f"{executor!r}")


def _is_dask_client(obj) -> bool:
    cls = type(obj)
    return (cls.__name__ == "Client" and cls.__module__.split(".")[0] == "distributed"
            and callable(getattr(obj, "submit", None)))


def genuine_failure(exc: BaseException) -> bool:
    """Whether a worker's exception is the program's own failure (its compiler ran and
    rejected it), which compiling here would only repeat; anything else (no compiler on
    the worker, a lost worker, a program that could not be sent) is the worker's."""
    return isinstance(exc, CompileError) and exc.returncode is not None
