"""Optional parts of the install: ``omegitops[kube]`` and ``omegitops[git]``.

``plan``, ``validate`` and ``sim:`` need neither the Kubernetes client (most of
an install's size) nor GitPython; ``--cluster kube`` and git work (URL
repositories, ``--commit``, ``--branch``) import them when they start, and say
which extra to install when one is missing.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from omegitops.util.errors import InputError

EXTRAS = {"kubernetes": "kube", "git": "git"}


def require(module: str, needed_for: str) -> ModuleType:
    """Import ``module``; a missing one is an error naming the extra that brings it."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        extra = EXTRAS[module.split(".")[0]]
        raise InputError(f"{needed_for} needs the {module.split('.')[0]} package, which "
                         f"omegitops installs as an extra: pip install 'omegitops[{extra}]' "
                         f"({err})") from err
