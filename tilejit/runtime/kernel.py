"""``JITKernel``: a compiled kernel behind an execution backend."""

from __future__ import annotations

import sys
import weakref
from typing import ClassVar

from ..builder.artifact import Artifact
from ..language.program import Program
from ..native import abi
from ..native.library import CoreKernel
from . import backends as _backends
from . import binding, frameworks, host
from . import bound as _bound

_MISSING = object()  # an input a keyword call has not given

# The kernel's internal interface: besides its public attributes, the only ones the rest
# of tilejit (the builder, the backends, the framework adapters) reads or sets; every other
# underscore name is the kernel's own (tests/test_layering.py holds the package to it). A
# framework keeps what it caches per kernel in the kernel's __dict__ under a key named
# after itself (``_torch_...``, ``_jax_...``).
INTERNAL_INTERFACE = frozenset({
    "_core_kernel",  # the core kernel (native.library.CoreKernel) the backends call
    # Entries of the kernel: calls no framework claims back, calls validated before a
    # claim, and a twin whose outputs are passed.
    "_unclaimed", "_validated", "_outputs_passed",
    # What a framework that claims or traces calls uses (``_alive``: every kernel alive,
    # whose ops torch.compile registers before it compiles).
    "_claimed_call", "_hand_claims_to", "_positional", "_trace_key", "_traced_call", "_alive",
    # The backend's binding of the kernel (runtime/backends.py, runtime/binding.py: the
    # plan's callback for inputs given by name).
    "_entry", "_attach_plan", "_call_with_keywords",
    # The call plan the backend attached (kept in the kernel's __dict__), whose claims a
    # framework takes over.
    "_call_plan",
})


class JITKernel:
    """A compiled kernel; call it with tensors: ``kernel(*args, stream=None)``. Inputs may
    also be given by their declared names: ``kernel(a, b, alpha=2.0)``.

    >>> kernel = tilejit.compile(prog, out_idx=-1)
    >>> c = kernel(a, b)          # C allocated by the framework of `a`, returned
    >>> kernel.c_prototype
    'void vec_add(float *A, float *B, float *C, int64_t n)'
    """

    def __new__(cls, artifact, execution_backend="auto", core_kernel=None):
        # The instance is of the backend's subclass, whose calls go to the backend's own
        # entry: no Python frame between the caller and the wrapper.
        impl = _backends.kernel_class(JITKernel, _backends.resolve(execution_backend))
        return super(JITKernel, impl).__new__(impl)

    # Every kernel alive in the process: torch.compile registers all their ops before it
    # compiles a graph (tilejit.frameworks.torch.op), so that a graph loaded from torch's caches finds
    # the op of a kernel that only a registered backward calls.
    _alive: ClassVar[weakref.WeakSet] = weakref.WeakSet()

    def __init__(self, artifact: Artifact, execution_backend: str = "auto", core_kernel=None):
        #: What the builder made (``tilejit.builder.artifact.Artifact``): the program, its
        #: signature, the images and their digests. Export, the torch op's schema and the
        #: XLA target are written from it.
        self.artifact = artifact
        signature = self._sig = artifact.signature
        self.execution_backend = _backends.resolve(execution_backend)
        # Each JITKernel has its own core kernel (and so its own CUDA modules); one opened
        # from an export (tilejit.load) is handed over.
        self._core_kernel = core_kernel or CoreKernel(signature.spec, artifact.library,
                                                      signature.entry, artifact.prebuilt)
        # The core numbers outputs in declaration order (that is the order the backend
        # allocates and returns them in); the caller gets them in out_idx order.
        _backends.bind(self, self.execution_backend, self._core_kernel, signature.output_order)
        if signature.target == "cuda":
            # Loaded ahead on the thread's current device (torch makes its device's
            # context current), so that a first call inside a graph capture loads
            # nothing. Any failure (no driver, an image the device refuses) is the
            # first call's to report.
            try:
                self._core_kernel.warmup(-1)
            except Exception:  # noqa: BLE001, S110 - reported by the call
                pass
        JITKernel._alive.add(self)
        frameworks.register_traced(self)
        frameworks.made(self)  # published by a framework imported later (JAX's target)
        # A tracing framework already imported (torch) loads its adapter, which makes
        # Dynamo inline its traced call in place of __call__ (see _traced_call). A process
        # that imports torch only later traces through _traced_call until a kernel made
        # after torch loads it.
        frameworks.load_present()

    @property
    def program(self) -> Program:
        """The kernel as declared (``tilejit.Program``)."""
        return self.artifact.program

    @property
    def library_path(self) -> str:
        """The compiled image the core loaded (in the cache, or in the export)."""
        return self.artifact.library

    @property
    def params(self):
        """The declared parameters (T.Buffer / T.Scalar / T.Pointer), in order."""
        return self.program.params

    @property
    def out_idx(self) -> list[int]:
        """Indices of the parameters allocated and returned, in return order."""
        return list(self._sig.out_idx)

    @property
    def jax_target(self) -> str:
        """The name of the kernel's XLA FFI target (``tilejit_<name>_<16 hex digits>``),
        from the kernel's content as its torch op's name: the same in every process that
        has the kernel, which is what a ``jax.export``-ed program calling it records. In a
        process that has imported JAX, the target is registered with XLA once this is
        read, so such a program finds it (``tilejit.load`` registers it, and a kernel
        made before JAX's import is registered with it: ``frameworks.made``)."""
        name = self.artifact.jax_target
        if "_jax_target" not in self.__dict__:
            self.__dict__["_jax_target"] = name
            if "jax" in sys.modules:
                frameworks.adapter_named("jax").publish(self)
        return name

    @property
    def jax_vmap_method(self) -> str:
        """How ``jax.vmap`` batches a call on JAX arrays (``ffi_call``'s ``vmap_method``):
        ``"sequential"`` (one call per element of the batch; right for every kernel) unless
        set to ``"expand_dims"`` or ``"broadcast_all"``, for a kernel that takes a leading
        batch dimension on every buffer."""
        return self.__dict__.get("_jax_vmap_method", "sequential")

    @jax_vmap_method.setter
    def jax_vmap_method(self, method: str) -> None:
        allowed = ("sequential", "sequential_unrolled", "expand_dims", "broadcast_all")
        if method not in allowed:
            raise ValueError(f"{self.name}: jax_vmap_method must be one of "
                             f"{', '.join(map(repr, allowed))}, got {method!r}")
        self.__dict__["_jax_vmap_method"] = method

    @property
    def target(self) -> str:
        return self._sig.target

    @property
    def name(self) -> str:
        return self.program.name

    @property
    def symbols(self):
        """The dynamic symbols, in the order they are declared (first appearance)."""
        return self._sig.symbols

    @property
    def c_prototype(self) -> str:
        """The prototype tilejit declares for the kernel function: its arguments in order,
        with tilejit's types. A definition may spell them differently as long as each is
        ABI-compatible (docs/kernel-abi.md)."""
        return self._sig.c_prototype

    def get_kernel_source(self) -> str:
        """The user's kernel source, as given."""
        return self.program.source

    def get_host_source(self) -> str:
        """The full file tilejit compiled: prelude, kernel source and packed-entry glue (CPU),
        or prelude, the kernel's declaration and its source (CUDA)."""
        return self.artifact.host_source

    @property
    def torch_op(self):
        """The kernel as a torch custom op (``torch._ops.OpOverload``,
        ``torch.ops.tilejit.<name>_<hash>.default``), registered with ``torch.library``
        on first use: schema, mutated buffers and a fake implementation come from the
        signature. ``torch.compile`` traces calls of the kernel as this op; see
        docs/torch-compile.md.

        >>> kernel.torch_op(a, b)     # what torch.compile and autograd run
        """
        return frameworks.adapter_named("torch").op(self)

    def register_autograd(self, backward, setup_context=None) -> None:
        """Makes the kernel differentiable: ``torch.library.register_autograd`` on its
        op, with that function's meaning (``backward(ctx, *grads)`` returns one gradient
        per input, None for those without; ``setup_context(ctx, inputs, output)`` saves
        what backward needs). Calls with tensors that require grad then run as the op,
        in eager mode and under ``torch.compile``; without a backward they raise.

        >>> def setup(ctx, inputs, output):
        ...     ctx.save_for_backward(inputs[0])
        >>> square.register_autograd(lambda ctx, g: twice_product(g, *ctx.saved_tensors),
        ...                          setup_context=setup)
        """
        frameworks.adapter_named("torch").register_autograd(self, backward, setup_context)

    def _traced_call(self, /, *args, **keywords):
        """The call as a tracer (``torch.compile``) traces it: the kernel's op (see
        ``tilejit.runtime.backends.kernel_class``; a call from Python never comes here).
        Once the tracing adapter is loaded Dynamo inlines its entry in place of this
        (``_torchdynamo_inline``, ``frameworks.traceable``): a module imported inside traced
        code costs every call of the compiled function a guard written in Python. The
        signature is the ctypes ``__call__``'s: Dynamo guards on the defaults of the
        function it replaces."""
        return frameworks.deferred_entry("kernel")(self, *args, **keywords)

    def _claimed_call(self, args: tuple, stream):
        """A call the core handed back because a framework must run it (``tj_claim``):
        with torch, a tensor requires grad while grad mode is on, or a tracer made it."""
        # The core took the call with trailing optional buffers left out: they are None.
        missing = self._core_kernel.num_inputs - len(args)
        if missing:
            args = (*args, *(None,) * missing)
        return frameworks.claimer(args).claimed_call(self, args, stream)

    def _hand_claims_to(self, runner, *, at_once: bool = False, record=None) -> None:
        """Lets a framework's ``runner(kernel, args, stream)`` take this kernel's claimed
        calls straight from the core, ahead of ``_claimed_call`` (which it passes any call
        it does not run itself; with ``at_once``, through ``_validated``), and its
        common case go to ``record`` from the core (``binding.Plan.hand_claims_to``)."""
        self.__dict__["_call_plan"].hand_claims_to(runner, at_once=at_once, record=record)

    @property
    def _unclaimed(self):
        """The kernel called so that no framework claims the call back: what its torch
        op runs (``tilejit.frameworks.torch.op.implementation``). Made on first use."""
        return self._own_entry("_unclaimed_entry", unclaimed=True)

    @property
    def _validated(self):
        """The kernel called so that every call is validated before a framework claims
        it, and a claimed one goes to ``_claimed_call``, whatever runner takes this
        kernel's claims (``_hand_claims_to``). Made on first use."""
        return self._own_entry("_validated_entry", unclaimed=False)

    def _own_entry(self, key: str, *, unclaimed: bool):
        entry = self.__dict__.get(key)
        if entry is None:
            made = _backends.own_entry(self, self.execution_backend, self._core_kernel,
                                       self._sig.output_order, unclaimed=unclaimed)
            entry = self.__dict__.setdefault(key, made)
        return entry[0]

    def _positional(self, args: tuple, keywords: dict) -> tuple[tuple, object]:
        """``(args, stream)`` of a call given ``keywords``: ``stream=`` (the launch stream,
        unless the kernel has an input named ``stream``: the keyword then passes that
        input, and the kernel launches on the framework's current stream), and the
        kernel's inputs by their declared names after any positional arguments, as a
        Python function takes them (``kernel(x, y, alpha=2.0)``); an optional buffer left
        out is None. Refused, naming the kernel: an unknown name, an output's name (the
        call allocates it), a name given twice, a missing input."""
        keywords = dict(keywords)
        names = list(self._sig.input_names)
        stream = host.pop_stream(keywords, names)
        if not keywords:
            return args, stream
        slots = [*args, *[_MISSING] * (len(names) - len(args))]
        for key, value in keywords.items():
            if key not in names:
                allocated = key in self._sig.names
                raise TypeError(f"{self.name}() got an unexpected keyword argument '{key}'"
                                + (" (an output: the call allocates it)" if allocated else ""))
            i = names.index(key)
            if i < len(args):
                raise TypeError(f"{self.name}() got multiple values for argument '{key}'")
            slots[i] = value
        optional = {name for name, p in zip(self._sig.names, self._sig.spec.params)
                    if p.kind == abi.TJ_PARAM_BUFFER and p.flags & abi.TJ_BUF_OPTIONAL}
        slots = [None if value is _MISSING and name in optional else value
                 for name, value in zip(names, slots)]
        missing = [repr(n) for n, value in zip(names, slots) if value is _MISSING]
        if missing:
            raise TypeError(f"{self.name}() missing {len(missing)} argument"
                            f"{'s' if len(missing) > 1 else ''}: {', '.join(missing)}")
        return tuple(slots), stream

    def _keyword_call(self, args: tuple, keywords: dict):
        """A call given keywords other than ``stream=`` alone (see ``_positional``)."""
        args, stream = self._positional(args, keywords)
        if stream is None:
            return self(*args)
        return self(*args, stream=stream)

    def _call_with_keywords(self, items: tuple, kwnames: tuple):
        """``_keyword_call`` as the core's host layer hands it over: the positional
        arguments, then the keywords' values (``kwnames``), as CPython passes them."""
        n = len(items) - len(kwnames)
        return self._keyword_call(items[:n], dict(zip(kwnames, items[n:])))

    def bind(self, /, *args, **keywords) -> _bound.BoundLaunch:
        """A bound launch of this call (`tilejit.runtime.bound.BoundLaunch`): the
        arguments validated and bound, the outputs allocated and the launch packed once;
        calling it launches again. Inputs may be given by name, as to a call; the stream
        is each launch's (``h(stream=s)``).

        >>> h = kernel.bind(a, b)
        >>> c = h()
        """
        args, stream = self._positional(args, keywords)
        if stream is not None:
            raise TypeError(f"{self.name}.bind() takes no stream=: each launch takes its "
                            "own, h(stream=s)")
        entry = self.__dict__.get("_bind_entry")
        if entry is None:
            plan = binding.Plan(self, self._core_kernel, self.execution_backend != "dlpack",
                                self._sig.output_order)
            entry = self.__dict__.setdefault("_bind_entry", (binding.bind_entry(plan), plan))
        return _bound.bind(self, entry[0], args)

    def warmup(self, device: int | None = None) -> JITKernel:
        """Loads a CUDA kernel's module on ``device`` (an ordinal; None: the thread's
        current context, torch's current device), so that its first launch there may
        happen during a CUDA graph capture; RuntimeError without a driver. A CPU kernel
        has nothing to load. Compiling and loading a kernel warm it up on the thread's
        current context already.

        >>> kernel.warmup(1)      # before capturing a graph on cuda:1
        """
        self._core_kernel.warmup(-1 if device is None else device)
        return self

    def with_backend(self, name: str) -> JITKernel:
        """The same compiled library behind another execution backend; no recompilation.
        It is the same kernel: the same torch op, the same registered backward."""
        # A loaded kernel's core kernel is rebuilt from the bytes it was opened from, never
        # from the directory, which may hold another export by now.
        core_kernel = self._core_kernel.reopen() if self.artifact.exported else None
        return JITKernel(self.artifact, name, core_kernel=core_kernel)

    def _outputs_passed(self) -> JITKernel:
        """The same compiled library with every output passed, not allocated (no
        ``out_idx``), and the same validation: what Inductor's direct entry calls with the
        buffers it allocated, inputs and outputs in declaration order. Not a kernel of the
        user's: it has no op of its own."""
        direct = JITKernel(self.artifact.outputs_passed(), self.execution_backend)
        JITKernel._alive.discard(direct)
        return direct

    def export(self, path, *, overwrite: bool = False):
        """Writes the kernel to the directory ``path``: its compiled image, its signature
        (``signature.tj``), ``kernel.h`` and a ``MANIFEST`` with the SHA-256 of every
        file; ``tilejit.load(path)`` and C's ``tj_kernel_open`` open it without a
        compiler (docs/export.md). A non-empty directory is refused unless
        ``overwrite=True``, which replaces it whole. Returns the directory.

        >>> kernel.export("kernels/vec_add")
        >>> same = tilejit.load("kernels/vec_add")
        """
        from ..builder.export import export

        return export(self.artifact, path, overwrite=overwrite)

    def __repr__(self) -> str:
        return (f"<JITKernel {self.c_prototype} target={self.target} "
                f"backend={self.execution_backend} out_idx={self.out_idx}>")

