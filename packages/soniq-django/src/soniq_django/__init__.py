"""Soniq for Django: a ``django.tasks`` backend, the ``soniq_worker`` command and admin views.

``TASKS = {"default": {"BACKEND": "soniq_django.SoniqBackend"}}`` plus
``"soniq_django"`` in ``INSTALLED_APPS``; see docs/django.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"
__all__ = ["SoniqBackend", "__version__"]

if TYPE_CHECKING:
    from soniq_django.backend import SoniqBackend


def __getattr__(name: str) -> Any:
    # Lazy, so that listing "soniq_django" in INSTALLED_APPS imports nothing that needs the app registry.
    if name == "SoniqBackend":
        from soniq_django.backend import SoniqBackend

        return SoniqBackend
    raise AttributeError(f"module 'soniq_django' has no attribute {name!r}")
