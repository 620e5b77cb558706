"""The opt-in mooncake.store package (python3 -m tierkv.mooncake_compat): installed into a venv,
used through ``mooncake.store`` as engines import it, refused next to a real mooncake package,
uninstalled."""

import os
import subprocess
import sys

import tierkv

BUILD_PYTHON = os.path.dirname(os.path.dirname(os.path.abspath(tierkv.__file__)))

USE = """
from mooncake.store import MooncakeDistributedStore, ReplicateConfig
import tierkv
s = MooncakeDistributedStore()
assert type(s) is tierkv.MooncakeDistributedStore
assert s.setup("localhost", "P2PHANDSHAKE", 8 << 20, 4 << 20, "tcp", "", "") == 0
cfg = ReplicateConfig()
cfg.replica_num = 1
assert s.put("k", b"value", cfg) == 0 and s.put("k", b"again", cfg) == 0
assert s.get("k") == b"value"
print("ok")
"""


def run(python, *args, env=None, check=True):
    return subprocess.run([python, *args], env=env, capture_output=True, text=True, check=check)


def test_install_use_refuse_uninstall_in_a_venv(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True)
    python = str(venv / "bin" / "python")
    env = dict(os.environ, PYTHONPATH=BUILD_PYTHON)
    # Before: no mooncake in the venv.
    assert run(python, "-c", "import mooncake", env=env, check=False).returncode != 0
    out = run(python, "-m", "tierkv.mooncake_compat", "install", env=env)
    assert "installed" in out.stdout and str(venv) in out.stdout
    assert run(python, "-c", USE, env=env).stdout.strip() == "ok"
    # Installing again over its own package is fine; status names it.
    run(python, "-m", "tierkv.mooncake_compat", "install", env=env)
    assert "installed at" in run(python, "-m", "tierkv.mooncake_compat", "status", env=env).stdout
    out = run(python, "-m", "tierkv.mooncake_compat", "uninstall", env=env)
    assert "removed" in out.stdout
    assert run(python, "-c", "import mooncake", env=env, check=False).returncode != 0


def test_refused_next_to_a_real_mooncake(tmp_path):
    real = tmp_path / "site" / "mooncake"
    real.mkdir(parents=True)
    (real / "__init__.py").write_text("# the real Mooncake wheel\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), BUILD_PYTHON]))
    for target in (str(tmp_path / "site"), str(tmp_path / "elsewhere")):
        out = run(sys.executable, "-m", "tierkv.mooncake_compat", "install", "--target", target,
                  env=env, check=False)
        assert out.returncode == 1
        assert "refused" in out.stderr and str(real) in out.stderr
    # uninstall never removes a package it did not write.
    out = run(sys.executable, "-m", "tierkv.mooncake_compat", "uninstall", "--target",
              str(tmp_path / "site"), env=env, check=False)
    assert out.returncode == 1 and (real / "__init__.py").exists()
