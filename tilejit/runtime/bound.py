"""Bound launches: ``kernel.bind(*args)`` binds a call once and launches it again and
again (``tj_bound``, core/src/call.c), for every backend: the core's host layer makes it
(``tj_host_bind_method``) and an object of the bound launch type owns it and launches it
(``tj_host_bound_vectorcall``)."""

from __future__ import annotations

from . import binding

_DOC = """A call of a kernel bound once: ``h = kernel.bind(a, b)`` validates the arguments,
binds the symbols, allocates the ``out_idx`` outputs and packs the launch; ``h()``
launches it again with the same arguments into the same outputs and returns them
(``h.outputs``). ``h(stream=s)`` launches on ``s``; without ``stream=`` the producer's
current stream is read at every launch (never kept), so a handle made outside
``torch.cuda.graph`` launches on the capture stream inside it. ``h.update(B=b2)``
swaps a tensor argument for another of the same dtype, shape and strides on the same
device (checked, with alignment; a ``ValueError`` naming the kernel and the argument
otherwise). ``h.kernel`` is the kernel.

The handle is a C object whose calls are CPython vectorcalls of the core's launch
(``tj_host_bound_vectorcall``): ``h()`` runs no Python frame between the caller and the
launch, and builds no argument tuple.

>>> h = kernel.bind(a, b)       # C allocated once
>>> c = h()                     # the same C, computed again
>>> h.update(A=a2)()            # with another A
"""


def update(self, /, **tensors):
    """Swaps tensor arguments, given by their input names; returns the handle. All or
    nothing: when one is refused, those swapped before it are swapped back."""
    names = self.kernel._core_kernel.input_names
    for name in tensors:
        if name not in names:
            raise TypeError(f"{self.kernel.name}: update() got an unexpected keyword "
                            f"argument '{name}' (inputs: {', '.join(names)})")
    bound, done = self._bound, []
    try:
        for name, tensor in tensors.items():
            index = names.index(name)
            self._update(index, tensor)
            done.append((index, bound[index]))
            bound[index] = tensor
    except BaseException:
        for index, previous in reversed(done):  # accepted before: accepted again
            self._update(index, previous)
            bound[index] = previous
        raise
    return self


def _repr(self) -> str:
    return f"<BoundLaunch of {self.kernel.name}>"


def _reduce(self):
    raise TypeError(f"{self.kernel.name}: a bound launch cannot be pickled (it holds "
                    "the tensors it launches on); bind again where it is needed")


_type: list = []


def launch_type() -> type:
    """``BoundLaunch``, the type of bound launches (made once, when the first is bound:
    it needs the core)."""
    if not _type:
        cls = binding.bound_type(_DOC)
        cls.update, cls.__repr__, cls.__reduce__ = update, _repr, _reduce
        _type.append(cls)
    return _type[0]


def bind(kernel, entry, args: tuple):
    """``kernel.bind(*args)`` once the inputs are in order: a new bound launch over
    ``entry`` (``binding.bind_entry``)."""
    # What each input is bound to now, for update's undo (left-out inputs: None).
    inputs = [*args] + [None] * (len(kernel._core_kernel.input_names) - len(args))
    return binding.bound_launch(entry, launch_type(), kernel, args, inputs)


def __getattr__(name: str):
    if name == "BoundLaunch":
        return launch_type()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
