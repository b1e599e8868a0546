"""Module names spine-triton users import, served by Spine's own modules.

`from triton.backends.spine_triton.driver import CPUDriver`, `import triton.language.extra.smt` and
`from triton.language.extra.cpu import libdevice` must work with the unmodified triton wheel, whose
directories we do not write into. A meta-path finder maps those names onto Spine modules when (and only
when) they are imported.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

ALIASES = {
    "triton.backends.spine_triton": "spine.triton_backend",
    "triton.backends.spine_triton.driver": "spine.triton_backend.driver",
    "triton.backends.spine_triton.compiler": "spine.triton_backend.compiler",
    "triton.language.extra.smt": "spine.language.smt",
    "triton.language.extra.cpu": "spine.language.cpu",
    "triton.language.extra.cpu.libdevice": "spine.language.cpu.libdevice",
}


class _AliasLoader(importlib.abc.Loader):

    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module):
        # The target module is already executed; keep its own name and spec.
        pass


class AliasFinder(importlib.abc.MetaPathFinder):

    def find_spec(self, fullname, path=None, target=None):
        real = ALIASES.get(fullname)
        if real is None:
            return None
        is_package = real in ("spine.triton_backend", "spine.language.smt", "spine.language.cpu")
        return importlib.util.spec_from_loader(fullname, _AliasLoader(real), is_package=is_package)


def install() -> None:
    if not any(isinstance(f, AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, AliasFinder())
