"""Refuse to run from a directory that soniq 0.1.0 and soniq-core both wrote into.

0.1.0 was a distribution named `soniq` shipping the `soniq` import package; soniq-core
ships the same import name, so installing it over 0.1.0 leaves a mix of both file sets.
Subpackages that only 0.1.0 had are the tell. The cost at import is one directory listing.
"""

from __future__ import annotations

import os

LEFTOVERS_OF_0_1_0 = ("core", "features", "backends")


def refuse_a_mixed_install(package_dir: str) -> None:
    try:
        present = set(os.listdir(package_dir))
    except OSError:
        return
    found = [name for name in LEFTOVERS_OF_0_1_0 if name in present]
    if found:
        where = ", ".join(os.path.join(package_dir, name) for name in found)
        raise ImportError(
            f"soniq 0.1.0 files are still installed inside soniq-core's package ({where}): the two "
            "distributions share the import name `soniq` and the mix does not work. Repair it with: "
            "pip uninstall -y soniq soniq-core && pip install soniq==0.2.0 "
            "(or, for core alone: pip uninstall -y soniq soniq-core && pip install soniq-core==0.2.0)"
        )


refuse_a_mixed_install(os.path.dirname(__file__))
