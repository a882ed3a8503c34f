"""Named extension slots: a lower layer declares one, the layers above fill it in ``AppConfig.ready()``.

A slot with no provider (the app above is not installed) answers nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Slot:
    """A named list of providers, filled by the apps above in ``AppConfig.ready()``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._providers: list[Callable[..., Any]] = []

    def register(self, provider: Callable[..., Any]) -> Callable[..., Any]:
        """Add ``provider`` (once: ``ready()`` may run more than once, e.g. in tests)."""
        if provider not in self._providers:
            self._providers.append(provider)
        return provider

    @property
    def providers(self) -> tuple[Callable[..., Any], ...]:
        return tuple(self._providers)

    def first(self, *args: Any, **kwargs: Any) -> Any:
        """The first provider's answer that is not empty (None, ""), in registration order; else None."""
        for provider in self._providers:
            answer = provider(*args, **kwargs)
            if answer not in (None, ""):
                return answer
        return None

    def __repr__(self) -> str:
        return f"<Slot {self.name}: {len(self._providers)} provider(s)>"
