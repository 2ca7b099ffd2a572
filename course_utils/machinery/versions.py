"""Which versions of the packages a run used (for manifests, reports and benchmark JSON)."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version

PACKAGES = ("torch", "transformers", "peft", "trl", "accelerate", "datasets", "numpy", "course_utils")


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """``{"python": ..., name: version or None when not installed}`` for each of ``names``."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return versions
