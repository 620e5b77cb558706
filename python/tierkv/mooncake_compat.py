"""An opt-in ``mooncake.store`` that is tierkv: code written for Mooncake's store runs unchanged.

    python3 -m tierkv.mooncake_compat install [--target DIR]
    python3 -m tierkv.mooncake_compat uninstall [--target DIR]
    python3 -m tierkv.mooncake_compat status [--target DIR]

``install`` writes a small package ``mooncake`` (``mooncake/__init__.py``, ``mooncake/store.py``)
into this interpreter's site-packages (a venv's when run from one; ``--target`` names another
directory), so that ``from mooncake.store import MooncakeDistributedStore, ReplicateConfig``
(what SGLang's Mooncake backend, LMCache's ``mooncakestore://`` connector and vLLM's Mooncake
store connector import) resolves to tierkv. It refuses, naming what it found, where a real
``mooncake`` package is installed, and ``uninstall`` removes only the package it wrote (its
``__init__.py`` carries a marker line). Exit status: 0 done, 1 refused, 2 bad usage.
"""

import argparse
import importlib.util
import os
import shutil
import sys
import sysconfig

MARKER = "# tierkv.mooncake_compat: this mooncake package is tierkv (remove with uninstall)"

INIT = f'''{MARKER}
"""Mooncake's store API served by tierkv (python3 -m tierkv.mooncake_compat)."""

TIERKV_COMPAT = True
'''

STORE = f'''{MARKER}
"""``mooncake.store`` on tierkv: the same classes, names and return conventions (docs/python.md,
"Mooncake compatibility")."""

from tierkv import (  # noqa: F401
    BufferHandle,
    ErrorCode,
    Descriptor,
    DiskDescriptor,
    MemoryDescriptor,
    MooncakeDistributedStore,
    ReplicaDescriptor,
    ReplicaType,
    ReplicaStatus,
    ReplicaTier,
    ReplicateConfig,
    SoftPinAction,
)
'''


def site_packages():
    """Where ``install`` writes by default: this interpreter's (or venv's) purelib."""
    return sysconfig.get_paths()["purelib"]


def _ours(package_dir):
    init = os.path.join(package_dir, "__init__.py")
    try:
        with open(init, encoding="utf-8") as f:
            return f.readline().rstrip("\n") == MARKER
    except OSError:
        return False


def _real_mooncake(target):
    """The path of a ``mooncake`` package that is not ours, in ``target`` or on sys.path."""
    candidate = os.path.join(target, "mooncake")
    if os.path.exists(candidate) and not _ours(candidate):
        return candidate
    spec = importlib.util.find_spec("mooncake")
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    origin = locations[0] if locations else spec.origin
    if origin and not _ours(origin if locations else os.path.dirname(origin)):
        return origin
    return None


def install(target):
    real = _real_mooncake(target)
    if real is not None:
        print(f"mooncake_compat: refused: a real mooncake package is installed at {real}; "
              "tierkv's compatibility package would shadow it (uninstall it first, or use a "
              "venv without it)", file=sys.stderr)
        return 1
    package = os.path.join(target, "mooncake")
    os.makedirs(package, exist_ok=True)
    for name, text in (("__init__.py", INIT), ("store.py", STORE)):
        with open(os.path.join(package, name), "w", encoding="utf-8") as f:
            f.write(text)
    print(f"mooncake_compat: installed {package}: 'mooncake.store' is tierkv")
    return 0


def uninstall(target):
    package = os.path.join(target, "mooncake")
    if not os.path.exists(package):
        print(f"mooncake_compat: nothing to remove at {package}")
        return 0
    if not _ours(package):
        print(f"mooncake_compat: refused: {package} is not tierkv's compatibility package "
              "(left as it is)", file=sys.stderr)
        return 1
    shutil.rmtree(package)
    print(f"mooncake_compat: removed {package}")
    return 0


def status(target):
    package = os.path.join(target, "mooncake")
    if _ours(package):
        print(f"mooncake_compat: installed at {package}")
    elif os.path.exists(package):
        print(f"mooncake_compat: {package} is another mooncake package")
    else:
        print(f"mooncake_compat: not installed in {target}")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m tierkv.mooncake_compat",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["install", "uninstall", "status"])
    parser.add_argument("--target", default=None,
                        help="directory to write the package into (default: this interpreter's "
                             "site-packages, %(default)s = " + site_packages() + ")")
    args = parser.parse_args(argv)
    target = os.path.abspath(args.target or site_packages())
    return {"install": install, "uninstall": uninstall, "status": status}[args.action](target)


if __name__ == "__main__":
    sys.exit(main())
