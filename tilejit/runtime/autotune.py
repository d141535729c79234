"""``@tilejit.autotune``: the fastest of a factory's configs, chosen once per argument set and
kept in the process, the disk cache and the remote cache.

>>> @tilejit.autotune(configs=[{"tile": t} for t in (8, 16, 32, 64)], warmup=3, rep=20)
... @tilejit.jit(out_idx=-1)
... def matmul(M, N, K, tile=16):
...     return tilejit.Program(...)
>>> kernel = matmul(512, 512, 512)          # every config compiled, checked, timed
>>> matmul.tuning(512, 512, 512).config      # {'tile': 32}

How a call goes (``AutotuneFunction.tuning``)::

    the call's arguments --seen--> the choice kept in the process (a dict lookup)
      |new
    configs (a list, or configs(*args)) -> one program per config (the factory's)
      -> the choice's key (arguments, configs, every program's content, options, device)
      -> the disk cache's entry (tunings/), else the remote's, else tune:
             compile every program (compile_many: threads, or executor= workers)
             inputs (autotune_inputs, else made from the first program's parameters)
             per config: check against ref_prog, warmup runs, rep timed runs, restoring
             every parameter the kernel writes after each run; the median is its latency
         the fastest config's index written as the entry (published to the remote)
      -> the chosen program compiled (a cache hit: its kernel was built when tuned)

A cached choice costs the factory's calls (programs are Python objects, cheap) and one
compile that is a cache hit: the losers are never compiled again.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import inspect
import platform
import statistics
import threading
import time

from ..builder import cache as _cache
from ..builder import tuning as _tuning
from ..builder.signature import lower
from ..language.lang import Buffer, PointerParam, Scalar
from ..language.program import Program
from . import frameworks
from .compilation import CompileErrors, compile, compile_many, resolved_options
from .fast_paths import FAST_PATHS
from .jit import JITFunction, LayoutJITFunction
from .kernel import JITKernel

__all__ = ["AutotuneError", "AutotuneFunction", "Trial", "Tuning", "autotune",
           "autotune_inputs"]

_inputs: contextvars.ContextVar = contextvars.ContextVar("tilejit_autotune_inputs",
                                                         default=None)


@contextlib.contextmanager
def autotune_inputs(*tensors):
    """Tunes on these tensors: within the block, an autotuned call that must tune times
    its configs on ``tensors`` (the kernel's inputs, in order: every parameter but the
    outputs of ``out_idx``) instead of inputs made from the parameters. A parameter the
    kernel writes is restored after every run: the tensors are as given afterwards. The
    choice is keyed by the call's arguments, not by these tensors: a later call with the
    same arguments, inside the block or not, in this process or another, takes it.

    >>> with tilejit.autotune_inputs(a, b):
    ...     kernel = matmul(M, N, K)
    """
    token = _inputs.set(tensors)
    try:
        yield
    finally:
        _inputs.reset(token)


@dataclasses.dataclass(frozen=True)
class Trial:
    """One config's outcome: its ``latency`` in seconds (the median of the timed runs), or
    None and the ``error`` (why it was skipped: it did not compile, raised, or differed
    from ``ref_prog``)."""

    config: dict
    latency: float | None
    error: str | None


@dataclasses.dataclass(frozen=True)
class Tuning:
    """The record of a choice: the fastest ``config`` (the dict as given), its ``latency``
    (seconds, the median of its timed runs), its ``kernel``, whether the choice came
    from a cache (``from_cache``: the process's, the disk's or the remote's; nothing was
    timed), and every config's ``trials``."""

    config: dict
    latency: float
    kernel: JITKernel
    from_cache: bool
    trials: tuple[Trial, ...] = dataclasses.field(default=())


class AutotuneError(RuntimeError):
    """Every config of an autotuned call failed; ``trials`` says why each did."""

    def __init__(self, message: str, trials=()):
        super().__init__(message)
        self.trials = tuple(trials)


def autotune(configs=None, *, warmup: int = 3, rep: int = 20, ref_prog=None,
             atol: float = 1e-2, rtol: float = 1e-2, executor=None, progress=None,
             workers: int | None = None, framework: str | None = None):
    """Decorator over a ``@tilejit.jit`` factory: calling the result returns the kernel of
    the fastest config for the call's arguments.

    - ``configs``: a list of dicts of the factory's keyword arguments, or a callable that
      receives the call's arguments and returns that list.
    - ``warmup`` untimed runs, then ``rep`` timed runs per config; the latency is their
      median (a monotonic clock on the CPU; CUDA events on the kernel's stream on a GPU).
    - ``ref_prog(*inputs)`` returns the expected outputs; a config whose outputs differ
      beyond ``atol``/``rtol`` is skipped.
    - ``executor``: compile the configs on a ``concurrent.futures.Executor``, a
      ``dask.distributed.Client`` or ``"ray"`` (``tilejit.compile_many``); ``workers``:
      local compile threads; ``progress``: a progress bar while compiling.
    - ``framework``: what made-up inputs are, ``"torch"`` or ``"numpy"`` (default: torch
      for CUDA kernels, NumPy for CPU ones).

    >>> @tilejit.autotune(configs=[{"block": 64}, {"block": 128}])
    ... @tilejit.jit(out_idx=-1)
    ... def vec_add(n, block=64): ...
    """
    if isinstance(configs, (JITFunction, LayoutJITFunction)):  # @autotune without (...)
        raise TypeError("autotune needs its configs: @tilejit.autotune(configs=[...]) above "
                        "@tilejit.jit(...)")

    def wrap(factory):
        return AutotuneFunction(factory, configs, warmup=warmup, rep=rep, ref_prog=ref_prog,
                                atol=atol, rtol=rtol, executor=executor, progress=progress,
                                workers=workers, framework=framework)

    return wrap


class AutotuneFunction:
    """A ``@tilejit.jit`` factory whose tuned arguments are chosen by timing (see the
    module docstring). ``f(*args)`` is the tuned kernel, ``f.tuning(*args)`` the record of
    the choice, ``f.jit`` the factory (``f.jit(*args, block=64)`` compiles one config)."""

    def __init__(self, factory, configs, *, warmup, rep, ref_prog, atol, rtol, executor,
                 progress, workers, framework):
        if not isinstance(factory, JITFunction):
            what = ("a jit(layout=...) function, which specialises on tensors rather than "
                    "arguments" if isinstance(factory, LayoutJITFunction)
                    else type(factory).__name__)
            name = getattr(factory, "__name__", type(factory).__name__)
            raise TypeError(f"{name}: autotune decorates a @tilejit.jit factory, got {what}; "
                            "stack @tilejit.autotune(...) above @tilejit.jit(...)")
        self.jit = factory
        self.name = factory.func.__name__
        where = f"{self.name}: autotune"
        for label, value, low in (("warmup", warmup, 0), ("rep", rep, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{where}: {label} must be an int >= {low}, got {value!r}")
        for label, value in (("atol", atol), ("rtol", rtol)):
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not value >= 0):
                raise ValueError(f"{where}: {label} must be a number >= 0, got {value!r}")
        if ref_prog is not None and not callable(ref_prog):
            raise TypeError(f"{where}: ref_prog must be callable, got "
                            f"{type(ref_prog).__name__}")
        if framework not in (None, "torch", "numpy"):
            raise ValueError(f"{where}: framework must be None, 'torch' or 'numpy', got "
                             f"{framework!r}")
        if executor is not None:
            from .executors import engine

            engine(executor, where)  # refused now, before anything compiles
        self._signature = inspect.signature(factory.func)
        params = self._signature.parameters.values()
        self._accepts_any = any(p.kind is p.VAR_KEYWORD for p in params)
        self._keywords = [p.name for p in params
                          if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if configs is None:
            raise ValueError(f"{where}: configs is required: a list of dicts of "
                             f"{self.name}()'s keyword arguments, or a callable returning one")
        self.configs = configs if callable(configs) else self._check_configs(configs)
        self.warmup, self.rep, self.ref_prog = warmup, rep, ref_prog
        self.atol, self.rtol = float(atol), float(rtol)
        self.executor, self.progress, self.workers = executor, progress, workers
        self.framework = framework
        self._chosen: dict = {}  # canonical key -> Tuning
        self._calls: dict = {}  # exact call -> Tuning (the fast path)
        self._lock = threading.Lock()
        self._key_locks: dict = {}
        functools.update_wrapper(self, factory.func)
        frameworks.register_traced(self)
        frameworks.load_present()  # a tracing framework imported already installs its tracer

    # ---- The call -------------------------------------------------------------------------

    def __call__(self, /, *args, **kwargs) -> JITKernel:
        if frameworks.compiling():  # traced by torch.compile (frameworks.traceable)
            return frameworks.deferred_entry("jit")(self, *args, **kwargs)
        try:  # the exact call seen before: one dict lookup (the key as in ``tuning``)
            return self._calls[(args, tuple(kwargs.items()), tuple(map(type, args)),
                                tuple(map(type, kwargs.values())))].kernel
        except (KeyError, TypeError):
            return self.tuning(*args, **kwargs).kernel

    def kernel_for(self, /, *args, **kwargs) -> JITKernel:
        """The tuned kernel of these arguments (what a call returns): what ``torch.compile``
        finds at trace time, outside the graph, for a call it traces."""
        return self.tuning(*args, **kwargs).kernel

    def tuning(self, /, *args, **kwargs) -> Tuning:
        """The record of the choice for these arguments: tuned now, or found (in this
        process, the disk cache or the remote cache: ``from_cache``)."""
        raw = (args, tuple(kwargs.items()), tuple(map(type, args)),
               tuple(map(type, kwargs.values())))
        try:
            return self._calls[raw]
        except (KeyError, TypeError):
            pass
        given = _inputs.get()  # what a tuning runs on; the choice is the arguments'
        configs, key = self._configs_and_key(args, kwargs)
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:  # threads asking for the same arguments tune once
            kept = self._chosen.get(key)
            if kept is None:
                record = self._choose(args, kwargs, configs, given)
                # What later asks get: the same choice, from the process's cache.
                kept = self._chosen[key] = dataclasses.replace(record, from_cache=True)
                # The factory's own calls with the chosen config find the kernel too.
                with contextlib.suppress(TypeError):
                    jit_key = self.jit._canonical_key(args, {**kwargs, **record.config})
                    with self.jit._lock:
                        self.jit._kernels.setdefault(jit_key, record.kernel)
            else:
                record = kept
        with contextlib.suppress(TypeError):  # an unhashable argument: no fast path
            self._calls[raw] = kept
        return record

    def cache_info(self) -> int:
        """How many argument sets have a choice in this process."""
        return len(self._chosen)

    # ---- Arguments and configs --------------------------------------------------------------

    def _check_configs(self, configs) -> list:
        where = f"{self.name}: autotune"
        if isinstance(configs, (dict, str, bytes)) or not hasattr(configs, "__iter__"):
            raise TypeError(f"{where}: configs must be a list of dicts, got "
                            f"{type(configs).__name__}")
        configs = list(configs)  # a tuple, a generator: read once
        if not configs:
            raise ValueError(f"{where}: configs is empty; give at least one dict of "
                             f"{self.name}()'s keyword arguments")
        for i, config in enumerate(configs):
            if not isinstance(config, dict):
                raise TypeError(f"{where}: configs[{i}] must be a dict of keyword arguments, "
                                f"got {type(config).__name__} {config!r}")
            for name in config:
                if not isinstance(name, str):
                    raise TypeError(f"{where}: configs[{i}] {config!r}: keys must be argument "
                                    f"names (str), got {name!r}")
                if name not in self._keywords and not self._accepts_any:
                    raise TypeError(f"{where}: configs[{i}] {config!r} sets '{name}', which "
                                    f"{self.name}() does not take (its keyword arguments: "
                                    f"{', '.join(self._keywords) or 'none'})")
        return configs

    def _configs_and_key(self, args, kwargs) -> tuple[list, tuple]:
        """The configs of a call (refused as above) and the call's key in this process:
        its arguments with the defaults of those no config sets, and the configs. A call
        that passes an argument a config sets, lacks one, or passes an unhashable one is
        refused in the function's name."""
        configs = self.configs
        if callable(configs):
            configs = configs(*args, **kwargs)
        configs = self._check_configs(configs)
        tuned = {name for config in configs for name in config}
        try:
            bound = self._signature.bind_partial(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}(): {exc}") from None
        for name in bound.arguments:
            if name in tuned:
                raise TypeError(f"{self.name}: argument '{name}' is chosen by autotune (a "
                                f"config sets it); leave it out, or call {self.name}.jit(..., "
                                f"{name}=...) for one config")
        for p in self._signature.parameters.values():
            if p.name in bound.arguments or p.name in tuned:
                continue
            if p.default is not p.empty:
                bound.arguments[p.name] = p.default
            elif p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(f"{self.name}(): missing a required argument: '{p.name}'")
        key = []
        for name, value in bound.arguments.items():
            try:
                hash(value)
            except TypeError:
                raise TypeError(f"{self.name}: argument '{name}' of type "
                                f"{type(value).__name__} is unhashable; autotuned arguments "
                                "must be hashable (use tuples, not lists)") from None
            key.append((name, type(value), value))
        return configs, (tuple(key), tuple(_freeze(c) for c in configs))

    # ---- Choosing ---------------------------------------------------------------------------

    def _choose(self, args, kwargs, configs, given) -> Tuning:
        programs: list = []
        errors: dict = {}
        for i, config in enumerate(configs):
            try:
                program = self.jit.func(*args, **kwargs, **config)
                if not isinstance(program, Program):
                    raise TypeError(f"{self.name}() must return a tilejit.Program, got "
                                    f"{type(program).__name__}")
            except Exception as exc:  # noqa: BLE001 - this config's failure, reported
                errors[i] = _reason(exc)
                program = None
            programs.append(program)
        options = self.jit.options.as_kwargs()
        key = self._entry_key(args, kwargs, configs, programs, errors, options)
        if key is None:  # arguments with no stable spelling: this process only
            return self._tune(configs, programs, errors, options, given)
        tuned: list = []

        def build(out):
            record = self._tune(configs, programs, errors, options, given)
            tuned.append(record)
            index = next(i for i, c in enumerate(configs) if c is record.config)
            out.write_bytes(_tuning.entry(
                self.name, index, len(configs), record.latency,
                [(i, t.latency, t.error) for i, t in enumerate(record.trials)],
                _device(options)))

        first = next((p for p in programs if p is not None), None)
        path = _cache.get_or_build(
            key, build, suffix=".json", check=_tuning.check_entry, area="tunings",
            info={"name": first.name if first is not None else self.name,
                  "target": options.get("target") or "cpu", "arch": platform.machine()},
            shared=True, verbose=bool(options.get("verbose")))
        if tuned:
            return tuned[0]
        # The key holds every config and program: the entry's index is this call's.
        record = _tuning.read_entry(path.read_bytes())
        index = record["chosen"]
        kernel = compile(programs[index], **options)
        trials = tuple(Trial(configs[t["index"]], t["latency"], t["error"])
                       for t in record["trials"])
        return Tuning(configs[index], record["latency"], kernel, True, trials)

    def _entry_key(self, args, kwargs, configs, programs, errors, options):
        """The disk and remote key of this choice, or None when an argument or a config
        has no stable spelling."""
        try:
            resolved = resolved_options(options, self.name)
            digests = []
            for i, program in enumerate(programs):
                if program is None:
                    digests.append(["error", errors[i]])
                    continue
                try:
                    sig = lower(program, options.get("out_idx"), resolved["target"])
                    digests.append(_tuning.program_digest(program, sig))
                except Exception as exc:  # noqa: BLE001 - a program that cannot lower
                    digests.append(["error", _reason(exc)])
            bound = self._signature.bind_partial(*args, **kwargs)
            return _tuning.tuning_key(
                function=f"{self.jit.func.__module__}.{self.jit.func.__qualname__}",
                arguments=_tuning.encode(dict(bound.arguments)),
                configs=_tuning.encode(list(configs)), programs=digests,
                options=_tuning.encode({k: v for k, v in resolved.items()
                                        if k not in ("verbose", "execution_backend")}),
                native=_native(resolved), device=_device(resolved),
                check=[_callable_name(self.ref_prog), self.atol, self.rtol],
                framework=self.framework)
        except (_tuning.Unencodable, TypeError, ValueError):
            return None

    def _tune(self, configs, programs, errors, options, given) -> Tuning:
        errors = dict(errors)
        kernels: dict = {}
        todo = [i for i, p in enumerate(programs) if p is not None]
        if todo:
            try:
                built = compile_many([programs[i] for i in todo], workers=self.workers,
                                     progress=self.progress, executor=self.executor,
                                     **options)
            except CompileErrors as exc:
                built = exc.kernels
                for (j, _), error in zip(exc.failed, exc.exceptions):
                    errors[todo[j]] = _reason(error)
            for i, kernel in zip(todo, built):
                if kernel is not None:
                    kernels[i] = kernel
        latencies: dict = {}
        if kernels:
            bench = _Bench(self, next(iter(kernels.values())), given)
            for i, kernel in kernels.items():
                try:
                    latencies[i] = bench.measure(kernel)
                except Exception as exc:  # noqa: BLE001 - this config's failure
                    errors[i] = _reason(exc)
        trials = tuple(Trial(c, latencies.get(i), None if i in latencies else errors.get(i))
                       for i, c in enumerate(configs))
        if not latencies:
            lines = [f"  configs[{i}] {t.config!r}: {t.error}"
                     for i, t in enumerate(trials)]
            raise AutotuneError(f"{self.name}: autotune: every one of the {len(configs)} "
                                "configs failed:\n" + "\n".join(lines), trials)
        best = min(latencies, key=lambda i: (latencies[i], i))
        return Tuning(configs[best], latencies[best], kernels[best], False, trials)


# Under torch.compile a call is traced as a @jit function's is (the "jit" entry of the
# tracing adapter): the kernel tuned or found at trace time, standing in the graph as its op.
frameworks.traceable(AutotuneFunction.__call__, "jit", FAST_PATHS)


# ---- Running and timing -----------------------------------------------------------------


class _Bench:
    """The inputs every config runs on, the reference outputs, and the runs themselves."""

    def __init__(self, tuner: AutotuneFunction, kernel: JITKernel, given):
        self.tuner, self.name = tuner, tuner.name
        self.cuda = kernel.target == "cuda"
        self.traced = frameworks.compiling()
        sig = kernel.artifact.signature
        if given is None:
            self.inputs = _make_inputs(tuner, kernel)
        else:
            # Tensors that need gradients are run as their detached selves (the same
            # memory): tuning records nothing for autograd.
            self.inputs = [x.detach() if getattr(x, "requires_grad", False)
                           and callable(getattr(x, "detach", None)) else x for x in given]
            if len(self.inputs) != len(sig.inputs):
                raise ValueError(
                    f"{self.name}: autotune_inputs got {len(self.inputs)} tensors; the kernel "
                    f"takes {len(sig.inputs)} inputs ({', '.join(sig.input_names)})")
        # Parameters the kernel may write (buffers not declared const), restored after
        # every run from these copies.
        params = kernel.params
        self.saved = [(j, _copy(self.inputs[j])) for j, i in enumerate(sig.inputs)
                      if isinstance(params[i], Buffer) and not params[i].const
                      and _writable(self.inputs[j])]
        self.written = [j for j, _ in self.saved]
        self.expected = None
        if tuner.ref_prog is not None:
            expected = tuner.ref_prog(*self.inputs)
            self.expected = [_host(x) for x in _as_tuple(expected)]
            self.restore()

    def restore(self) -> None:
        for j, copy in self.saved:
            _assign(self.inputs[j], copy)

    def run(self, kernel):
        if self.traced:  # torch.compile's trace time: the kernel itself, not its op
            return kernel._unclaimed(*self.inputs)
        return kernel(*self.inputs)

    def measure(self, kernel) -> float:
        tuner = self.tuner
        if self.expected is not None:
            self.check(kernel)
        for _ in range(tuner.warmup):
            self.run(kernel)
            self.restore()
        times = []
        for _ in range(tuner.rep):
            times.append(self.timed(kernel))
            self.restore()
        return statistics.median(times)

    def timed(self, kernel) -> float:
        if self.cuda:
            timer = _torch().device_timer("cuda")
            if timer is not None:
                start, stop = timer
                start()
                self.run(kernel)
                return stop()
        begin = time.perf_counter()
        self.run(kernel)
        return time.perf_counter() - begin

    def check(self, kernel) -> None:
        out = self.run(kernel)
        if out is not None:
            actual = _as_tuple(out)
        else:  # written in place: the last buffers it may write, as many as ref_prog gives
            count = len(self.expected)
            if count > len(self.written):
                self.restore()
                raise ValueError(f"ref_prog returned {count} outputs; the kernel returns none "
                                 f"and may write {len(self.written)} buffers")
            actual = tuple(self.inputs[j] for j in self.written[len(self.written) - count:])
        actual = [_host(x) for x in actual]
        self.restore()
        if len(actual) != len(self.expected):
            raise ValueError(f"ref_prog returned {len(self.expected)} outputs, the kernel "
                             f"{len(actual)}")
        import numpy as np

        for n, (a, e) in enumerate(zip(actual, self.expected)):
            e = np.asarray(e)
            if a.shape != e.shape:
                raise ValueError(f"output {n} has shape {a.shape}, ref_prog's {e.shape}")
            if not np.allclose(a, e, atol=self.tuner.atol, rtol=self.tuner.rtol,
                               equal_nan=True):
                diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
                worst = np.unravel_index(np.nanargmax(diff), diff.shape) if diff.size else ()
                raise ValueError(f"output {n} differs from ref_prog beyond atol="
                                 f"{self.tuner.atol:g}, rtol={self.tuner.rtol:g}: "
                                 f"{a[worst]!r} where ref_prog gives {e[worst]!r} at index "
                                 f"{tuple(int(x) for x in worst)}")


def _make_inputs(tuner: AutotuneFunction, kernel: JITKernel) -> list:
    """Random inputs for ``kernel``'s parameters: torch tensors for a CUDA kernel (or
    ``framework="torch"``), NumPy arrays otherwise."""
    framework = tuner.framework or ("torch" if kernel.target == "cuda" else "numpy")
    where = f"{tuner.name}: autotune"
    if framework == "torch":
        try:
            _torch()
        except ImportError:
            raise RuntimeError(f"{where}: making inputs for a {kernel.target} kernel needs "
                               "torch; install it, or pass the inputs with `with "
                               "tilejit.autotune_inputs(...)`") from None
    import numpy as np

    rng = np.random.default_rng(0)
    params, sig = kernel.params, kernel.artifact.signature
    inputs = []
    for i in sig.inputs:
        param, name = params[i], sig.names[i]
        if isinstance(param, Buffer):
            shape = []
            for d in param.shape:
                if not isinstance(d, int):
                    raise ValueError(  # noqa: TRY004 - a value the caller must supply
                        f"{where}: parameter '{name}' has the symbolic size {d!r} "
                        f"(shape {tuple(param.shape)!r}); tilejit cannot make inputs for it: "
                        f"pass them with `with tilejit.autotune_inputs(...)`")
                shape.append(d)
            values = _random(rng, param.dtype, shape, where, name, framework)
            if framework == "torch":
                values = _torch().tensor_from(values, param.dtype, kernel.target)
            inputs.append(values)
        elif isinstance(param, Scalar) and param.dtype.startswith(("float", "complex")):
            inputs.append(float(rng.random()))
        else:
            kind = "a pointer" if isinstance(param, PointerParam) else f"a {param.dtype} scalar"
            raise ValueError(f"{where}: parameter '{name}' is {kind}; tilejit cannot make up "
                             "its value: pass the inputs with `with "
                             "tilejit.autotune_inputs(...)`")
    return inputs


def _random(rng, dtype: str, shape, where: str, name: str, framework: str):
    import numpy as np

    if dtype == "bool":
        data = rng.random(shape) < 0.5
    elif dtype.startswith(("int", "uint")):
        data = rng.integers(0, 8, size=shape).astype(np.int64)
    elif dtype.startswith("complex"):
        data = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    else:
        data = rng.standard_normal(shape)
    if framework == "torch":
        return np.ascontiguousarray(data)  # the adapter makes the tensor of its dtype
    try:
        return np.ascontiguousarray(data.astype(dtype))
    except TypeError:
        raise ValueError(f"{where}: parameter '{name}' is {dtype}, which NumPy has no type "
                         "for; use framework='torch', or pass the inputs with `with "
                         "tilejit.autotune_inputs(...)`") from None


# ---- Tensors, whatever their framework ----------------------------------------------------


def _is_tensor(x) -> bool:
    return hasattr(x, "__dlpack__") and hasattr(x, "shape")


def _writable(x) -> bool:
    """Whether a kernel could write ``x`` (a torch tensor, a writable NumPy-like array);
    an immutable array (JAX's) is refused by the kernel's checks, never written."""
    if not _is_tensor(x):
        return False
    if hasattr(x, "copy_"):
        return True
    if type(x).__module__.split(".")[0] in ("jax", "jaxlib"):
        return False
    flags = getattr(x, "flags", None)
    if flags is not None and hasattr(flags, "writeable"):
        return bool(flags.writeable)
    return hasattr(x, "__setitem__") and callable(getattr(x, "copy", None))  # CuPy's


def _copy(x):
    clone = getattr(x, "clone", None)
    if callable(clone) and hasattr(x, "copy_"):
        return clone()
    return x.copy()


def _assign(x, saved) -> None:
    if hasattr(x, "copy_"):
        x.copy_(saved)
    else:
        x[...] = saved


def _host(x):
    """A NumPy copy of ``x``'s values (torch tensors moved to the host, types NumPy lacks
    widened): what it holds now, whatever is later written to ``x``."""
    import numpy as np

    if hasattr(x, "detach"):
        x = x.detach().cpu()
        try:
            return np.array(x.numpy(), copy=True)
        except TypeError:  # a type NumPy lacks (bfloat16, the float8s): widened
            return np.array(x.float().numpy(), copy=True)
    return np.array(x, copy=True)


def _as_tuple(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _freeze(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("list", tuple(_freeze(v) for v in value))
    return (type(value), value)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _callable_name(fn) -> str | None:
    if fn is None:
        return None
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


def _native(options: dict) -> str | None:
    from ..builder.compiler import find_cc, native_flags, native_resolution

    flags = options.get("compile_flags") or []
    if not native_flags(flags):
        return None
    try:
        return native_resolution(find_cc(), flags)
    except Exception:  # noqa: BLE001 - no compiler: the kernels' own keys say so
        return "unresolved"


_devices: dict = {}


def _device(options: dict) -> str:
    """The device a choice is timed on: the GPU's name and compute capability for CUDA
    kernels, the CPU's model and architecture for CPU kernels."""
    target = options.get("target") or "cpu"
    if target in _devices:
        return _devices[target]
    if target == "cuda":
        text = None
        with contextlib.suppress(Exception):  # no torch, or no device
            text = _torch().device_name("cuda")
        if text is None:  # the architecture the driver reports (or is given) alone
            from ..builder.cuda_compiler import resolve_arch

            text = "unknown"
            with contextlib.suppress(Exception):
                text = ",".join(resolve_arch(options.get("arch")))
        text = f"cuda {text}"
    else:
        text = f"cpu {platform.machine()} {_tuning.cpu_model()}"
    _devices[target] = text
    return text


def _torch():
    """torch's adapter (``tilejit.runtime.frameworks``): torch is known to its wing only.
    ImportError without torch."""
    return frameworks.adapter_named("torch")
