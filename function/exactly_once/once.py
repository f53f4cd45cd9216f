"""Per-instance singletons for clients that must not be built at import."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class OncePerInstance(Generic[T]):
    """Builds a value on first use, once, however many requests race for it.

    Clients (Firestore, Workflows) are built lazily so that importing main.py needs no
    credentials and no network, then shared by every request of the instance so their
    channels are reused.
    """

    def __init__(self, build: Callable[[], T]) -> None:
        self._build = build
        self._value: T | None = None
        self._lock = threading.Lock()

    def __call__(self) -> T:
        if self._value is None:
            with self._lock:
                if self._value is None:
                    self._value = self._build()
        return self._value

    @contextlib.contextmanager
    def given(self, value: T) -> Iterator[None]:
        """`value` in place of the instance's own while the block runs: the client a test hands a
        job that asks for the instance's (exactly_once.testing.JobEnvironment)."""
        with self._lock:
            before, self._value = self._value, value
        try:
            yield
        finally:
            with self._lock:
                self._value = before
