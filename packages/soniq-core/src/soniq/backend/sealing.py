"""Sealed values for backend authors and the contract suite: how they look, and making them.

A store keeps a sealed value as any other JSON (see `soniq.encryption`); these names let a test
make real ones and run core's rotation against a backend without reaching into core's modules.
"""

from __future__ import annotations

from typing import Any

from soniq.encryption import ENVELOPE_KEY, TEXT_PREFIX, Cipher, available, generate_key


async def rotate_keys(backend: object, cipher: Cipher, **options: Any) -> Any:
    """Core's ``soniq keys rotate`` walk over `backend` (`soniq.key_rotation.rotate_keys`)."""
    from soniq.key_rotation import rotate_keys as rotate

    return await rotate(backend, cipher, **options)


__all__ = ["ENVELOPE_KEY", "TEXT_PREFIX", "Cipher", "available", "generate_key", "rotate_keys"]
