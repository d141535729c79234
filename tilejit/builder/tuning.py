"""An autotuner's choice as a cache entry: its key, its JSON, and the check a local or
remote entry must pass before it is believed.

The key (``tuning_key``) holds everything the choice depends on: the factory, the call's
arguments, each config, the content of every candidate program as compiled (its lowered
signature, its source, a binary's digest, the compile options), the device it was timed
on, how outputs were checked, the inputs' shapes when given, and tilejit's version. An
edited kernel, another GPU or another CPU model is a new key, tuned again.

An entry (``tuning.json``)::

    {"format": 1, "function": "...", "chosen": 2, "count": 4,
     "latency": 1.2e-05, "statistic": "median",
     "trials": [{"index": 0, "latency": 1.5e-05, "error": null}, ...],
     "device": "...", "tilejit": "..."}

``chosen`` is the index of the winning config in the call's config list; the config
itself is not stored (it is read from the list, as given, when the entry is used).
"""

from __future__ import annotations

import hashlib
import json
import math
import platform

from ..language.program import Program
from ..version import VERSION
from .cache import artifact_key
from .signature import Signature

__all__ = ["check_entry", "cpu_model", "encode", "entry", "program_digest", "read_entry",
           "tuning_key"]

_FORMAT = 1


class Unencodable(TypeError):
    """A value with no stable spelling for a key (an object whose text holds an address)."""


def encode(value):
    """``value`` as JSON a key can hold, keeping the types apart that Python keeps apart
    (1, 1.0 and True; a tuple and a list); ``Unencodable`` for anything without one stable
    spelling."""
    if value is None or isinstance(value, (bool, int, str)):
        return [type(value).__name__, value]
    if isinstance(value, float):
        return ["float", repr(value)]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [encode(v) for v in value]]
    if isinstance(value, dict):
        return ["dict", sorted([str(k), encode(v)] for k, v in value.items())]
    text = repr(value)
    if " at 0x" in text or text.startswith("<"):
        raise Unencodable(f"{type(value).__name__} {text[:60]}")
    return [f"{type(value).__module__}.{type(value).__qualname__}", text]


def program_digest(program: Program, signature: Signature) -> str:
    """The content of a candidate program as compiled: its lowered signature (parameters,
    symbols, expressions, launches), its output indices, its source and language, and a
    prebuilt binary's SHA-256."""
    binary = (hashlib.sha256(program.binary_bytes()).hexdigest()
              if program.binary is not None else None)
    text = json.dumps({"spec": repr(signature.spec), "out_idx": list(signature.out_idx),
                       "prototype": signature.c_prototype, "source": program.source,
                       "language": getattr(program, "language", None), "binary": binary},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def cpu_model() -> str:
    """This machine's CPU as the system names it (``/proc/cpuinfo``'s model name, or its
    ``Model`` / ``cpu model`` line on ARM and MIPS): part of a choice's key, and of the
    benchmarks' headers."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith(("model name", "Model", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def tuning_key(**parts) -> str:
    """The cache key of a choice: ``parts`` (function, arguments, configs, programs,
    options, device, check, inputs) with tilejit's version."""
    return artifact_key(kind="tuning", tilejit=VERSION, **parts)


def entry(function: str, chosen: int, count: int, latency: float, trials, device: str) -> bytes:
    """The bytes of a ``tuning.json``. ``trials``: ``(index, latency or None, error or
    None)`` for every config."""
    return json.dumps({
        "format": _FORMAT, "function": function, "chosen": chosen, "count": count,
        "latency": latency, "statistic": "median",
        "trials": [{"index": i, "latency": lat, "error": err} for i, lat, err in trials],
        "device": device, "tilejit": VERSION}, sort_keys=True, indent=1).encode()


def read_entry(data: bytes) -> dict:
    """A ``tuning.json``'s fields, checked (``check_entry``); ``ValueError`` saying what is
    wrong."""
    try:
        record = json.loads(data)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    problem = _problem(record)
    if problem is not None:
        raise ValueError(problem)
    return record


def check_entry(path: str) -> str | None:
    """Why the ``tuning.json`` at ``path`` must not be believed, or None: the cache's check
    of an entry it did not write itself (a remote's, an executor's)."""
    try:
        with open(path, "rb") as handle:
            read_entry(handle.read())
    except (OSError, ValueError) as exc:
        return str(exc)
    return None


def _problem(record) -> str | None:
    if not isinstance(record, dict) or record.get("format") != _FORMAT:
        return "not a tuning record of this format"
    count, chosen, trials = record.get("count"), record.get("chosen"), record.get("trials")
    if not isinstance(count, int) or count < 1:
        return f"bad config count {count!r}"
    if not isinstance(chosen, int) or not 0 <= chosen < count:
        return f"chosen config {chosen!r} is not one of {count}"
    latency = record.get("latency")
    if not isinstance(latency, (int, float)) or not math.isfinite(latency) or latency < 0:
        return f"bad latency {latency!r}"
    if not isinstance(trials, list) or len(trials) != count:
        return "the trials do not match the configs"
    for i, trial in enumerate(trials):
        if (not isinstance(trial, dict) or trial.get("index") != i
                or not isinstance(trial.get("latency"), (int, float, type(None)))
                or not isinstance(trial.get("error"), (str, type(None)))):
            return f"trial {i} is malformed"
    if trials[chosen].get("latency") is None:
        return "the chosen config has no latency"
    return None
