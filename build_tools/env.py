"""tilejit's environment variables (docs/environment.md), read and checked in one place.

Every reader of a `TILEJIT_*` variable goes through these functions (and so does every
read of another tool's variable tilejit uses: `CUDA_HOME`, `CUDA_PATH`, `CXX`, `PATH`,
through `text`), so a value is checked the same way wherever it is read, and a bad one
is refused every time it is read (before anything is built or written), with a message
naming the variable, the value found and what is accepted::

    TILEJIT_FAST_PATHS='maybe': expected one of 1, true, yes, on, 0, false, no, off (any case)

An unset or empty variable is its default. Each value is parsed once per process (the
result is kept per variable and value).

This module imports nothing from `tilejit`.
"""

from __future__ import annotations

import os
import shlex
import threading
from collections.abc import Callable

__all__ = ["BadValue", "choice", "command", "flag", "parsed", "seconds", "size", "text"]

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")

_lock = threading.Lock()
_parsed: dict[tuple[str, str], object] = {}


class BadValue(ValueError):
    """An environment variable holds a value tilejit does not accept."""

    def __init__(self, name: str, value: str, accepted: str):
        super().__init__(f"{name}={value!r}: expected {accepted}")
        self.name, self.value, self.accepted = name, value, accepted


def text(name: str) -> str:
    """The variable's value, stripped; "" when unset."""
    return os.environ.get(name, "").strip()


def _parse(name: str, parse: Callable[[str], object]) -> object:
    value = text(name)
    key = (name, value)
    with _lock:
        if key in _parsed:
            return _parsed[key]
    result = parse(value)  # raises BadValue; a refused value is refused at every read
    with _lock:
        _parsed[key] = result
    return result


def flag(name: str, default: bool = False) -> bool:
    """A boolean variable: 1/true/yes/on or 0/false/no/off, any case; `default` if unset.

    Example:
        >>> os.environ["TILEJIT_VERBOSE"] = "Yes"; flag("TILEJIT_VERBOSE")
        True
    """
    def parse(value: str) -> bool:
        if not value:
            return default
        if value.lower() in TRUE:
            return True
        if value.lower() in FALSE:
            return False
        raise BadValue(name, value, "one of " + ", ".join(TRUE + FALSE) + " (any case)")

    return _parse(name, parse)  # type: ignore[return-value]


def choice(name: str, choices: tuple[str, ...]) -> str | None:
    """One of `choices` (exact), or None when unset.

    Example:
        >>> os.environ["TILEJIT_TARGET"] = "cuda"; choice("TILEJIT_TARGET", ("cpu", "cuda"))
        'cuda'
    """
    def parse(value: str) -> str | None:
        if not value:
            return None
        if value not in choices:
            raise BadValue(name, value, "one of " + ", ".join(choices))
        return value

    return _parse(name, parse)  # type: ignore[return-value]


def size(name: str, parse_size: Callable[[str], int]) -> int | None:
    """A size in bytes (`parse_size`: `500M`, `2G`, `0`), or None when unset."""
    def parse(value: str) -> int | None:
        if not value:
            return None
        try:
            return parse_size(value)
        except ValueError:
            raise BadValue(name, value, "a size of 0 or more bytes: a number with an optional "
                           "unit K, M, G or T (powers of 1024), like 500M or 2G") from None

    return _parse(name, parse)  # type: ignore[return-value]


def seconds(name: str, default: float) -> float:
    """A duration in seconds, a number greater than 0 (`0.5`, `2`, `30`); `default` if unset.

    Example:
        >>> os.environ["TILEJIT_REMOTE_CACHE_TIMEOUT"] = "0.5"
        >>> seconds("TILEJIT_REMOTE_CACHE_TIMEOUT", 2.0)
        0.5
    """
    def parse(value: str) -> float:
        if not value:
            return default
        try:
            number = float(value)
        except ValueError:
            number = float("nan")
        if not 0 < number < float("inf"):
            raise BadValue(name, value, "a number of seconds greater than 0, like 0.5 or 30")
        return number

    return _parse(name, parse)  # type: ignore[return-value]


def parsed(name: str, parse: Callable[[str], object], accepted: str) -> object:
    """`parse(value)` of a set variable, None when unset; a `ValueError` from `parse` is a
    `BadValue` saying `accepted` and the error's own words.

    Example:
        >>> os.environ["TILEJIT_REMOTE_CACHE"] = "http://x"
        >>> parsed("TILEJIT_REMOTE_CACHE", parse_url, "redis://HOST:PORT or file:///PATH")
        BadValue: TILEJIT_REMOTE_CACHE='http://x': expected redis://HOST:PORT or ... (...)
    """
    def checked(value: str) -> object:
        if not value:
            return None
        try:
            return parse(value)
        except ValueError as exc:
            raise BadValue(name, value, f"{accepted} ({exc})") from None

    return _parse(name, checked)


def command(name: str) -> list[str]:
    """A command or flags, split like a shell command; [] when unset."""
    def parse(value: str) -> list[str]:
        try:
            return shlex.split(value)
        except ValueError as exc:
            raise BadValue(name, value, f"words split like a shell command ({exc})") from None

    return list(_parse(name, parse))  # type: ignore[arg-type]
