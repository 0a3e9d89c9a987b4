"""Loads OSWorld's `desktop_env` without its heaviest dependencies.

Its metrics package imports every metric's dependencies when any metric is used (torch through
easyocr, librosa, Playwright, OpenCV...), and its setup controller imports Playwright and PyDrive
for its Chrome and Google Drive steps. `defer_missing_imports()` lets those (`DEFERRABLE`), when
not installed, load as stand-ins that raise `ModuleNotFoundError`, naming the package, only if a
metric or setup step really uses them. Everything else must be installed.

Standard library only: Orchard's client imports it, and `orchard convert osworld` ships this very
file into the tasks it writes (their setup and verifier run OSWorld's code in the sandbox).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any


class _Missing(types.ModuleType):
    """A module that is not installed, standing in until something uses it."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__path__: list[str] = []

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _MissingThing(f"{self.__name__}.{attr}", self.__name__)


class _MissingThing:
    def __init__(self, what: str, module: str):
        self._what, self._module = what, module

    def __getattr__(self, attr: str) -> Any:
        return _MissingThing(f"{self._what}.{attr}", self._module)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise ModuleNotFoundError(
            f"{self._what}: the package providing {self._module!r} is not installed "
            "(an OSWorld metric or getter needs it; install it where the evaluator runs)",
            name=self._module,
        )

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)


# What `desktop_env`'s modules import at load time for a few metrics and setup steps only, and
# that weighs most (OCR with torch, audio, a browser driver, image processing, Google Drive):
# stood in for when not installed. Everything else they import must be installed.
DEFERRABLE = ("easyocr", "librosa", "playwright", "cv2", "skimage", "acoustid", "pydrive", "borb", "fitz",
              "formulas", "imagehash", "torch")


class _DeferMissing(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`DEFERRABLE` packages, when not installed, as `_Missing` stand-ins."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name.split(".")[0] not in DEFERRABLE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            if finder.find_spec(name, path, target) is not None:
                return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec: Any) -> types.ModuleType:
        return _Missing(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


_DEFERRING = _DeferMissing()


def defer_missing_imports() -> None:
    """Lets OSWorld's evaluator modules import packages that are not installed (see the module's
    doc); a metric that really uses one raises `ModuleNotFoundError` naming it."""
    if _DEFERRING not in sys.meta_path:
        sys.meta_path.append(_DEFERRING)
