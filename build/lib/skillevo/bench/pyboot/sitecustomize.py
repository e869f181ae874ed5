"""skillevo's interpreter boot for the verify and oracle phases (on PYTHONPATH, read-only, outside the workspace).

With PYTHONSAFEPATH=1 nothing the agent wrote is on sys.path when the test runner is imported. The code under
test comes first for the top-level modules it defines (a finder ahead of site-packages: a library the machine
also has installed, as Debian has six, yaml or requests, is tested as the workspace holds it, not as installed),
except the standard library's and the test runner's (RUNNER): a workspace file named like the runner, one of its
modules or a plugin (pytest.py, _pytest/, pluggy.py) can never stand in for it.

The code under test is its source: modules found under the workspace are compiled from their .py files every
time, so a `__pycache__/*.pyc` the agent wrote (an unchecked-hash pyc, or a timestamp pyc whose header copies
the source's mtime and size) and a sourceless `.pyc` left in place of a module are never loaded.
"""

import importlib.machinery
import os
import sys

_code = os.environ.get("SKILLEVO_CODE_DIR")
if _code and _code not in sys.path:
    sys.path.append(_code)


class _SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """Compiles the source, never reads a cached .pyc (whatever its header claims)."""

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        return self.source_to_code(self.get_data(path), path)


_source_only = importlib.machinery.FileFinder.path_hook(
    (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES),
    (_SourceOnlyLoader, importlib.machinery.SOURCE_SUFFIXES))  # no SourcelessFileLoader: a bare .pyc is no module


def _workspace_finder(entry):
    """The finder for a sys.path entry inside the workspace (pytest inserts test directories too); other
    entries (the standard library, site-packages) keep Python's own finders and caches."""
    real = os.path.realpath(entry or os.getcwd())
    if _code and (real == _code or real.startswith(_code.rstrip("/") + "/")):
        return _source_only(entry)
    raise ImportError("not the workspace")


# the test runner and what it imports (pytest's dependencies and optional helpers): never the workspace's
RUNNER = frozenset({"pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "exceptiongroup", "tomli",
                    "pygments", "colorama", "argcomplete", "sitecustomize", "usercustomize"})


class _WorkspaceFirst:
    """A meta path finder ahead of sys.path's: a top-level module the workspace's root defines is the workspace's."""

    _finder = None

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if path is not None or name in RUNNER or name in sys.stdlib_module_names:
            return None  # a submodule follows its package's __path__; the runner and the stdlib are never shadowed
        if cls._finder is None:
            try:
                cls._finder = _source_only(_code)
            except ImportError:  # no such directory
                return None
        spec = cls._finder.find_spec(name, target)
        return spec if spec is not None and spec.loader is not None else None  # a namespace portion: sys.path's

    @classmethod
    def invalidate_caches(cls):
        if cls._finder is not None:
            cls._finder.invalidate_caches()


if _code:
    sys.path_hooks.insert(0, _workspace_finder)
    sys.path_importer_cache.clear()
    _at = next((i for i, f in enumerate(sys.meta_path) if getattr(f, "__name__", "") == "PathFinder"),
               len(sys.meta_path))
    sys.meta_path.insert(_at, _WorkspaceFirst)
