"""The fake ``cupy.cuda``: devices, streams and events as CuPy has them, per thread."""

from __future__ import annotations

import threading

_state = threading.local()
_next_stream = [0x57E000]


def _stack(name: str, default):
    stack = getattr(_state, name, None)
    if stack is None:
        stack = [default]
        setattr(_state, name, stack)
    return stack


def _current_device() -> int:
    return _stack("devices", 0)[-1]


def _reset() -> None:
    for name in ("devices", "streams"):
        if hasattr(_state, name):
            delattr(_state, name)


class Device:
    """``with Device(1):`` makes device 1 current on this thread."""

    def __init__(self, device=None):
        self.id = _current_device() if device is None else int(device)

    def __enter__(self):
        _stack("devices", 0).append(self.id)
        return self

    def __exit__(self, *exc):
        _stack("devices", 0).pop()

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(self.id)


class Stream:
    """A stream of the current device; ``with Stream():`` makes it current on this thread.
    ``Stream.null`` is the default (legacy) stream, ptr 0."""

    null: Stream

    def __init__(self, null=False, non_blocking=False, ptds=False):
        self.device_id = _current_device()
        if null:
            self.ptr = 0
        else:
            self.ptr = _next_stream[0]
            _next_stream[0] += 0x10

    def __enter__(self):
        _stack("streams", None).append(self)
        return self

    def __exit__(self, *exc):
        _stack("streams", None).pop()

    def synchronize(self) -> None:
        pass

    def record(self, event=None):
        event = event or Event()
        event.record(self)
        return event


Stream.null = Stream(null=True)


def get_current_stream(device_id=-1) -> Stream:
    """The thread's current stream (``Stream.null`` unless a ``with Stream():``), recorded."""
    from . import RECORD

    current = _stack("streams", None)[-1] or Stream.null
    RECORD["streams"].append(current.ptr)
    return current


class Event:
    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self.stream = None

    def record(self, stream=None) -> None:
        self.stream = stream or get_current_stream()

    def synchronize(self) -> None:
        pass


def get_elapsed_time(start: Event, end: Event) -> float:
    """ms between two events: the fake has no clock, 0."""
    return 0.0
