"""The package's version, and what importing it from the source tree (no extension built there, or
one built for another Python) says: what to do, not a circular-import error."""

import pathlib
import re
import shutil
import subprocess
import sys

import tilestream

SOURCE = pathlib.Path(__file__).resolve().parents[2]


def cmake_version():
    return re.search(r"project\(tilestream VERSION ([0-9.]+)", (SOURCE / "CMakeLists.txt").read_text()).group(1)


def test_version_is_the_projects():
    assert tilestream.__version__ == cmake_version()
    pyproject = (SOURCE / "python" / "pyproject.toml").read_text()
    assert re.search(r'^version = "([0-9.]+)"', pyproject, re.M).group(1) == cmake_version()
    meson = (SOURCE / "python" / "meson.build").read_text()
    assert re.search(r"project\('tilestream', version: '([0-9.]+)'", meson).group(1) == cmake_version()


def import_from(path, tmp_path):
    """Imports tilestream in a fresh interpreter with only `path` added; returns (code, stderr)."""
    r = subprocess.run([sys.executable, "-c", "import tilestream"], cwd=tmp_path, capture_output=True, text=True,
                       env={"PYTHONPATH": str(path), "PATH": "/usr/bin:/bin"})
    return r.returncode, r.stderr


def test_source_tree_says_build_the_extension_first(tmp_path):
    code, err = import_from(SOURCE / "python", tmp_path)
    assert code != 0
    assert "Build the extension first" in err and "pip install --no-build-isolation ./python" in err, err
    assert "circular import" not in err and "partially initialized" not in err, err


def test_an_extension_for_another_python_is_named(tmp_path):
    package = tmp_path / "tree" / "tilestream"
    shutil.copytree(SOURCE / "python" / "tilestream", package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "_tilestream.cpython-299-x86_64-linux-gnu.so").write_bytes(b"")
    code, err = import_from(package.parent, tmp_path)
    assert code != 0 and "was built for another Python" in err and "_tilestream.cpython-299" in err, err
