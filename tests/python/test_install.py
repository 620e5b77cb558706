"""The documented offline install: a venv with the system site packages, pip without build
isolation or an index (README, docs/python.md)."""

import os
import subprocess
import sys

import tierkv


def test_offline_venv_install(tmp_path):
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(tierkv.__file__)))
    assert os.path.exists(os.path.join(package_dir, "pyproject.toml")), package_dir
    venv = tmp_path / "venv"
    # The line of the README: Debian's pip (a system site package) installs into the venv.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PIP_NO_CACHE_DIR"] = "1"
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-build-isolation",
                    "--no-index", "--quiet", package_dir], check=True, env=env, cwd=str(tmp_path))
    probe = ("import tierkv, numpy; s = tierkv.DistributedStore(); "
             "assert s.setup('h', 'P2PHANDSHAKE', 8 << 20, 1 << 20, 'tcp', '', '') == 0; "
             "assert s.put('k', b'v') == 0 and s.get('k') == b'v'; "
             "print(tierkv.__file__)")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", probe], check=True, env=env,
                         cwd=str(tmp_path), capture_output=True, text=True).stdout
    assert str(venv) in out  # imported from the venv, not from the build tree
