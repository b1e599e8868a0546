"""Module names spine-triton users import, served by Spine's own modules.

`from triton.backends.spine_triton.driver import CPUDriver` (and triton-shared's spelling,
`triton.backends.triton_shared.driver`), `import triton.language.extra.smt`,
`from triton.language.extra.cpu import libdevice` and `from triton.backends.spine_triton.proton import
profiler` must work with the unmodified triton wheel, whose directories we do not write into. A meta-path
finder maps those names onto Spine modules when (and only when) they are imported.

The same finder follows the import of `triton.profiler` (triton's own module, loaded as it is) with
spine.proton.triton_api.install, which lets `proton.start(..., backend="cpu")` reach Spine's profiler (and
that of `triton.profiler.proton` with complete_command_module, spine-triton's spelling of the API), and
that of `triton.runtime.driver` with spine.triton_backend.driver_choice.install (triton-cpu's
`set_active_to_cpu()`), and that of `triton.testing` with spine.triton_backend.testing_api.install
(triton-cpu's `do_bench(..., measure_time_with_hooks=True)`), and that of Inductor's lowerings
with spine.inductor.install (torch.compile's matrix products on Spine's riscv64 target).
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

ALIASES = {
    "triton.backends.spine_triton": "spine.triton_backend",
    "triton.backends.spine_triton.driver": "spine.triton_backend.driver",
    "triton.backends.spine_triton.compiler": "spine.triton_backend.compiler",
    "triton.backends.spine_triton.proton": "spine.proton",
    # triton-shared's CPU backend: code written for it selects its driver under this name
    "triton.backends.triton_shared": "spine.triton_backend",
    "triton.backends.triton_shared.driver": "spine.triton_backend.driver",
    "triton.backends.triton_shared.compiler": "spine.triton_backend.compiler",
    "triton.language.extra.smt": "spine.language.smt",
    "triton.language.extra.cpu": "spine.language.cpu",
    "triton.language.extra.cpu.libdevice": "spine.language.cpu.libdevice",
    # FlagTree's tile language, which spine-triton also offers
    "triton.language.extra.tle": "spine.language.tle",
}
PACKAGES = ("spine.triton_backend", "spine.language.smt", "spine.language.cpu", "spine.proton")

# modules (triton's, Inductor's) whose import is followed by a hook of ours: module → "spine module:function"
FOLLOWED = {"triton.profiler": "spine.proton.triton_api:install",
            "triton.profiler.proton": "spine.proton.triton_api:complete_command_module",
            "triton.runtime.driver": "spine.triton_backend.driver_choice:install",
            "triton.testing": "spine.triton_backend.testing_api:install",
            "torch._inductor.lowering": "spine.inductor:install"}


def _run_hook(spec: str) -> None:
    module, function = spec.split(":")
    try:
        getattr(importlib.import_module(module), function)()
    except Exception as err:  # the user's import must succeed even if our hook cannot
        warnings.warn(f"Spine could not hook into {module}: {err}", RuntimeWarning, stacklevel=3)


class _AliasLoader(importlib.abc.Loader):

    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module):
        # The target module is already executed; keep its own name and spec.
        pass


class _FollowedLoader(importlib.abc.Loader):
    """The real loader of a followed module, then our hook once the module has run."""

    def __init__(self, real, hook: str):
        self.real = real
        self.hook = hook

    def __getattr__(self, name):
        return getattr(self.real, name)

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module):
        self.real.exec_module(module)
        _run_hook(self.hook)


class AliasFinder(importlib.abc.MetaPathFinder):

    def find_spec(self, fullname, path=None, target=None):
        if fullname in FOLLOWED:
            return self._followed_spec(fullname, path, target)
        real = ALIASES.get(fullname)
        if real is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(real), is_package=real in PACKAGES)

    def _followed_spec(self, fullname, path, target):
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _FollowedLoader(spec.loader, FOLLOWED[fullname])
                return spec
        return None


def install() -> None:
    if not any(isinstance(f, AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, AliasFinder())
    for module, hook in FOLLOWED.items():
        if module in sys.modules:  # imported before us: hook in now
            _run_hook(hook)
