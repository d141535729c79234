"""Framework adapters: what the runtime asks of a tensor framework, and the registry that
finds the framework of a Python type.

The binding (``tilejit.runtime.binding``, ``tilejit.runtime.host``) names no framework.
For a type of tensor it asks the type's adapter (``adapter_for``):

- ``allocator(dtype, device)``: how outputs are made for calls with such arguments;
- ``stream(device_type, device_id)``: the framework's current stream, for producers
  without the DLPack exchange API; ``stream_handle(stream)``: the handle of one of its
  stream objects given as ``stream=``; ``dlpack_keywords``: how ``__dlpack__`` is
  asked (its ``stream``);
- ``view_check(cls)`` / ``lazy_view(obj)``: lazy views DLPack cannot describe (torch's
  conjugate and negative bits);
- ``claim(cls)`` / ``claims(obj, failed)`` / ``claimed_call(kernel, args, stream)``: calls
  the framework must run itself (autograd, tracers), handed back by the core
  (``tj_claim``);
- ``tensor_from(values, dtype, device)``, ``device_timer(device)``, ``device_name(device)``:
  inputs an autotuner makes up, and how it times and names the device
  (``tilejit.runtime.autotune``);
- ``import_refusal(obj)``: why an object cannot be imported, said plainly;
  ``exportable(obj)``: an alias ``__dlpack__`` exports when the object is refused;
  ``exported(obj, capsule)``: ``__dlpack__``'s capsule, corrected where the framework
  exports something other than what the tensor says.

An adapter is a subclass of ``Adapter`` (whose methods are the answers of a framework
with none of these features) registered under the top-level module its types come from
(``register("torch", loader)``); the loader runs when a type of that module is first
seen, so an optional framework is imported only by a process that uses it. Built-in
adapters are registered by ``tilejit.frameworks``; a new framework is one module there.

A framework may also trace calls (``torch.compile``): ``register(..., traces=...)``. The
runtime's callables (kernels, ``@jit`` functions) register their ``__call__`` with
``traceable``; when a tracing adapter loads, it installs what its tracer inlines for each
kind of call (``install_tracer``).
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import threading
import weakref
from collections.abc import Callable

from ..native import abi

CLAIM_NONE, CLAIM_VALIDATED, CLAIM_NOW = (abi.TJ_CLAIM_NONE, abi.TJ_CLAIM_VALIDATED,
                                          abi.TJ_CLAIM_NOW)


class Adapter:
    """A framework as the runtime sees it. The defaults are a framework with no streams,
    no lazy views and no claims; an adapter overrides what its framework has."""

    name = ""  # the top-level module of the framework's types

    def allocator(self, dtype: str, device: tuple[int, int]) -> Callable[[tuple], object]:
        """A function ``shape -> new tensor`` of element type ``dtype`` (tilejit's name)
        on DLPack ``device`` ``(type, id)``."""
        raise NotImplementedError

    def stream(self, device_type: int, device_id: int) -> int:
        """The framework's current stream on a device (0: none)."""
        return 0

    def stream_handle(self, stream) -> int | None:
        """The raw handle of ``stream``, an object of this framework given as ``stream=``
        that has neither ``__cuda_stream__`` nor ``cuda_stream`` (CuPy's ``Stream``: its
        ``ptr``); None: not a stream this framework knows."""
        return None

    #: What to pass ``__dlpack__`` besides ``max_version``, the same for every object of
    #: the framework, or None for nothing (CuPy: ``{"stream": -1}``, the launch being on
    #: its current stream). A class attribute, not a method: a call asks once per tensor.
    dlpack_keywords: dict | None = None

    def view_check(self, cls: type):
        """None when objects of ``cls`` are never lazy views; else a ``tj_view_bits``
        tuple to read the bits in place, or a function that asks the framework per object
        (the binding then calls ``lazy_view``)."""
        return

    def lazy_view(self, obj) -> int:
        """The ``TJ_VIEW_*`` bits of ``obj``."""
        return 0

    def reader(self, cls: type):
        """For a type read through ``__dlpack__`` (no DLPack exchange API), a fast path
        that reads its objects in place, with no capsule: ``(read, context, make)``, the
        addresses of a ``tj_producer.read`` function, its context, and a
        ``tj_producer.make`` function (None: outputs come from ``allocator``) over the same
        context, which a call tries before ``__dlpack__`` and the allocator (None: every
        object is read through ``__dlpack__``). The adapter vouches that they give what
        ``__dlpack__`` and ``allocator`` would for every object they read or make, and
        that ``read`` reads no object ``__dlpack__`` would refuse."""
        return

    def tensor_from(self, values, dtype: str, device: str):
        """A tensor of this framework holding NumPy ``values`` as ``dtype`` (tilejit's
        name) on ``device`` (``"cpu"`` or ``"cuda"``): inputs tilejit makes up (an
        autotuner's)."""
        raise NotImplementedError(f"tilejit cannot make {self.name or 'these'} tensors")

    def device_timer(self, device: str):
        """``(start, stop)`` timing what runs between them on the framework's current
        stream of ``device`` (``stop()`` returns seconds, waiting for the stream), or None
        when the framework has no clock of its own there (the host's is used)."""
        return

    def device_name(self, device: str) -> str | None:
        """What the framework calls the current ``device`` (a GPU's name and compute
        capability), or None."""
        return

    def claim(self, cls: type):
        """How the core learns that the framework must run a call with objects of ``cls``
        (``tj_claim``): None (never), ``("always",)``, or ``("ask", probe, scope, key,
        idle)`` (see ``tilejit.runtime.binding``)."""
        return

    def claims(self, obj, failed: int) -> int:
        """The public answer to ``claim`` for one object (``tj_claim_kind``)."""
        return CLAIM_NONE

    def claimed_call(self, kernel, args: tuple, stream):
        """Runs a call the core handed back because this framework claimed it."""
        raise RuntimeError(f"{kernel.name}: the {self.name} adapter claims no calls")

    def publish(self, kernel) -> None:
        """Makes ``kernel`` callable by programs the framework compiled without calling it
        here (JAX: a ``jax.export``-ed program naming the kernel's XLA target)."""
        return

    def import_refusal(self, obj) -> str | None:
        """Why ``obj`` cannot be imported, when the adapter can say it plainly."""
        return None

    def exportable(self, obj) -> object | None:
        """An alias of ``obj`` over the same memory that ``__dlpack__`` exports, when
        ``obj`` itself is refused (BufferError); None: there is none."""
        return None

    def exported(self, obj, capsule):
        """``capsule``, what ``obj.__dlpack__()`` returned, as the core is to read it: the
        framework may correct what its own export gets wrong (torch's strides of size-1
        dimensions, ``tilejit.frameworks.torch.dlpack``)."""
        return capsule


_lock = threading.RLock()
_loaders: dict[str, Callable[[], Adapter]] = {}  # module root -> its adapter's loader
_adapters: dict[str, Adapter] = {}  # module root -> its adapter, once loaded
_default: list[str] = []  # the root of types no adapter claims (NumPy)
_tracing: list[str] = []  # the roots of frameworks that trace calls
_own: dict = {}  # "own" -> tilejit's own adapter (tilejit.Array, calls without tensors)
_by_type: dict = {}  # type -> its adapter, decided once


def register(root: str, loader: Callable[[], Adapter], *, default: bool = False,
             traces: dict | None = None, compiling: Callable[[], bool] | None = None,
             publishes: bool = False) -> None:
    """Makes ``loader()`` the adapter of types defined under module ``root``; ``default``:
    also of types of no registered framework; ``publishes``: its adapter publishes the
    kernels made before the framework was imported once it is (``made``).

    A framework that traces calls gives ``traces``: for each kind of call, the entry its
    tracer inlines before the adapter is loaded (it loads the adapter with an import
    statement, which Dynamo runs rather than traces), and ``compiling``, whether it is
    tracing, asked without loading the adapter."""
    with _lock:
        _loaders[root] = loader
        if publishes and root not in _publishing:
            _publishing.append(root)
        if default:
            _default[:] = [root]
        if traces is not None:
            _tracing[:] = [root]
            _deferred.update(traces)
            _compiling_before[:] = [compiling]
            for call, kind in _traceable:
                if kind not in _inlined:
                    call._torchdynamo_inline = traces[kind]
        _by_type.clear()


def register_own(adapter: Adapter) -> None:
    """tilejit's own adapter: for ``NoneType`` (a call with no tensor argument) and the
    types tilejit defines (``tilejit.Array``)."""
    _own["own"] = adapter
    _by_type.clear()


def adapter_named(root: str) -> Adapter:
    """The adapter registered for ``root``, loaded on first use. No lock: a loader returns
    its module's one adapter (the import system serialises the import), and the first
    load may happen while Dynamo traces a call, which cannot trace a lock."""
    adapter = _adapters.get(root)
    if adapter is None:
        adapter = _adapters.setdefault(root, _loaders[root]())
    return adapter


def _root_of(cls: type) -> str | None:
    if cls is type(None):
        return "own"
    for base in getattr(cls, "__mro__", (cls,)):
        root = (getattr(base, "__module__", "") or "").split(".")[0]
        if root in _loaders:
            return root
        if root == "tilejit":
            return "own"
    return _default[0] if _default else None


def adapter_for(cls: type) -> Adapter:
    """The adapter of objects of type ``cls``: a subclass follows its base (a
    ``torch.Tensor`` subclass is torch's), a type of no registered framework gets the
    default's, ``NoneType`` and tilejit's own types tilejit's."""
    adapter = _by_type.get(cls)
    if adapter is None:
        root = _root_of(cls)
        adapter = _own["own"] if root == "own" else adapter_named(root)
        adapter = _by_type.setdefault(cls, adapter)
    return adapter


# ---- Publishing ------------------------------------------------------------------------

_publishing: list[str] = []  # the roots of frameworks whose adapters publish kernels (JAX)
# root -> (the kernels made before it was imported, alive: a weak set; the kernels loaded
# before it was imported, kept until then as a load publishes a kernel for good).
_unpublished: dict = {}


def made(kernel) -> None:
    """Called for each kernel made (compiled or loaded): a framework that publishes kernels
    (``Adapter.publish``: JAX registers its XLA target) and is not imported yet publishes
    it as soon as it is, if it is still alive, so that a program that framework runs
    finds the kernel whichever came first. Nothing imports the framework: a hook on the
    import system (``_AfterImport``) waits for the process to import it."""
    for root in _publishing:
        if root not in sys.modules:
            _waiting(root)[0].add(kernel)


def publish(kernel) -> None:
    """Publishes a loaded kernel (``tilejit.load``) with every framework that publishes
    kernels: now where the framework is imported, else as soon as it is, the kernel kept
    alive until then (a program exported elsewhere may be all that calls it) where the
    framework is installed (elsewhere nothing can import it: the kernel is not kept)."""
    for root in _publishing:
        if sys.modules.get(root) is not None:
            adapter_named(root).publish(kernel)
        elif root not in sys.modules and importlib.util.find_spec(root) is not None:
            _waiting(root)[1].append(kernel)


def _waiting(root: str) -> tuple:
    """The kernels waiting for ``root`` to be imported; the hook that waits, installed."""
    with _lock:
        if root not in _unpublished:
            _unpublished[root] = (weakref.WeakSet(), [])
            sys.meta_path.insert(0, _AfterImport(root))
        return _unpublished[root]


def _publish_waiting(root: str) -> None:
    """Publishes the kernels alive that were made before ``root`` was imported; one that
    fails is said in a warning naming it (the import itself goes on, and the kernel's
    first call with the framework's tensors says the same as an error)."""
    with _lock:
        made_before, loaded_before = _unpublished.pop(root, ((), ()))
        waiting = list(dict.fromkeys([*loaded_before, *made_before]))
    for kernel in waiting:
        try:
            adapter_named(root).publish(kernel)
        except Exception as exc:  # noqa: BLE001 - said, not raised into the user's import
            import warnings

            warnings.warn(f"{kernel.name}: not made callable by {root} programs when {root} "
                          f"was imported: {type(exc).__name__}: {exc}", RuntimeWarning,
                          stacklevel=2)


class _AfterImport:
    """A meta path finder that publishes the kernels waiting for ``root`` once the module
    ``root`` has finished importing, then leaves ``sys.meta_path``. It finds nothing
    itself: the other finders find the module, and its loader is wrapped
    (``_ThenPublish``) for that one import."""

    def __init__(self, root: str):
        self.root = root
        self.asking = threading.local()  # set while the other finders are asked

    def find_spec(self, name: str, path=None, target=None):
        if name != self.root or getattr(self.asking, "now", False):
            return None
        self.asking.now = True
        spec = None
        try:
            for finder in [f for f in sys.meta_path if f is not self]:
                find = getattr(finder, "find_spec", None)
                spec = find(name, path, target) if find is not None else None
                if spec is not None:
                    break
        finally:
            self.asking.now = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _ThenPublish(spec.loader, self)
        return spec


class _ThenPublish:
    """The loader of the framework's module for its one import: the module sees its own
    loader, runs, and then the waiting kernels are published."""

    def __init__(self, loader, finder: _AfterImport):
        self.loader, self.finder = loader, finder

    def __getattr__(self, name: str):
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        module.__loader__ = self.loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        if self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)
        _publish_waiting(self.finder.root)


_claimers: dict = {}  # type -> the adapter of its framework if that framework claims, else None


def claimer(args: tuple) -> Adapter:
    """The adapter that claimed a call with ``args``: that of the first argument whose
    framework claims calls (answered once per type)."""
    for value in args:
        cls = type(value)
        try:
            adapter = _claimers[cls]
        except KeyError:
            found = adapter_for(cls)
            adapter = _claimers.setdefault(
                cls, found if type(found).claimed_call is not Adapter.claimed_call else None)
        if adapter is not None:
            return adapter
    raise RuntimeError("a call was claimed, but no argument is of a framework that claims")


def framework_of(cls: type) -> str:
    """The name of the framework of ``cls`` (``"torch"``, ``"numpy"``, ``"tilejit"``)."""
    return adapter_for(cls).name


# ---- Tracing ---------------------------------------------------------------------------

_traced_objects: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_trace_numbers = itertools.count()


def register_traced(obj) -> None:
    """Gives ``obj`` (a kernel, a jit function) ``obj._trace_key``, a string naming it
    while it lives (``traced_object``). Traced code hands Dynamo's constant functions
    that string, not the object: every torch version reads a string attribute as a
    constant (with a guard on it), while passing a Python object to
    ``torch.compiler.assume_constant_result`` only works from torch 2.13."""
    key = f"{type(obj).__name__}-{next(_trace_numbers)}"
    obj._trace_key = key
    _traced_objects[key] = obj


def traced_object(key: str):
    """The object ``register_traced`` gave ``key``."""
    return _traced_objects[key]


_traceable: list = []  # (function, kind): the __call__ functions a tracer inlines around
_inlined: dict = {}  # kind -> what the loaded tracer inlines for it
_deferred: dict = {}  # kind -> what it inlines before its adapter is loaded
_compiling_before: list = []  # [whether it traces, asked before its adapter is loaded]
_tracer: list = []  # the tracing adapter, once loaded


def load_present() -> None:
    """Loads the adapters of tracing frameworks already imported by the process, so that
    their tracer is installed before they trace a call (a framework imported later is
    loaded when a kernel is made after it, or when it traces a call)."""
    if not _tracer:
        for root in _tracing:
            if sys.modules.get(root) is not None:
                adapter_named(root)


def _compiling_before_tracer() -> bool:
    """Whether a tracer runs the call, asked before a tracing adapter is loaded: only a
    framework already imported can be tracing."""
    return bool(_tracing) and sys.modules.get(_tracing[0]) is not None and _compiling_before[0]()


compiling = _compiling_before_tracer
"""Whether a tracer (torch.compile) is tracing the call: the tracing adapter's own
``is_compiling`` once it is loaded (``install_tracer``)."""


def traceable(call, kind: str, fast_paths: bool) -> None:
    """Registers ``call`` (a class's ``__call__``) as a call of ``kind`` ("kernel", "jit",
    "layout") that a tracer inlines around: with the fast paths, ``call.
    _torchdynamo_inline`` names the entry Dynamo traces in its place (the loaded
    tracer's, else the one the tracing framework registered to load it)."""
    if not fast_paths:
        return
    with _lock:
        _traceable.append((call, kind))
        entry = _inlined.get(kind) or _deferred.get(kind)
        if entry is not None:
            call._torchdynamo_inline = entry


def tracer_installed() -> bool:
    """Whether the tracing framework (torch) is installed here, imported or not: what a
    fast path for its tracer is reported for (``python -m tilejit doctor``)."""
    import importlib.util

    return any(sys.modules.get(root) is not None or importlib.util.find_spec(root) is not None
               for root in _tracing)


def deferred_entry(kind: str):
    """The entry a tracer runs for a call of ``kind`` when the call's ``__call__`` takes
    the traced branch itself (``compiling()``, without the fast paths)."""
    return _inlined.get(kind) or _deferred[kind]


def install_tracer(adapter, inlined: dict, is_compiling: Callable[[], bool]) -> None:
    """Makes ``adapter`` the tracer: ``inlined[kind]`` is what it traces for each kind of
    call (on every call registered, and to be registered), ``is_compiling`` how a call
    knows it is traced."""
    global compiling
    with _lock:
        _tracer[:] = [adapter]
        _inlined.update(inlined)
        compiling = is_compiling
        for call, kind in _traceable:
            call._torchdynamo_inline = inlined[kind]
