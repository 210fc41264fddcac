"""Builds the native part of the tilestream package for python/meson.build (`pip install ./python`):
the extension _tilestream<EXT_SUFFIX> and the project's shared libraries it links, built by CMake
for the Python that runs this script, copied into --out-dir with the extension's RPATH set to
$ORIGIN, so the installed package finds its libtilestream beside it and nothing of the build tree.

TILESTREAM_CMAKE_BUILD_DIR=<dir> takes the extension from an existing CMake build instead (built
already, for this Python: nothing is rebuilt there; the python_pip_install test uses it).
TILESTREAM_CMAKE_ARGS adds arguments to the CMake configure step (e.g. a compiler launcher).
"""

import argparse
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
# Loaded by libtilestream from its own folder when their devices are first asked for; shipped when built.
BACKEND_MODULES = ("libtilestream_cuda.so", "libtilestream_opencl.so")


def fail(message):
    print(f"build_native.py: {message}", file=sys.stderr)
    sys.exit(1)


def run(command):
    print("+", shlex.join(str(c) for c in command), flush=True)
    if subprocess.run(command).returncode != 0:
        fail(f"{command[0]} failed (its output is above)")


def build(source, build_dir):
    """Configures (once) and builds the extension target; returns the CMake build directory."""
    if not (build_dir / "CMakeCache.txt").exists():
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        run(["cmake", "-S", source, "-B", build_dir, *generator, "-DCMAKE_BUILD_TYPE=Release",
             f"-DPython3_EXECUTABLE={sys.executable}", "-DTILESTREAM_PYTHON=ON", "-DTILESTREAM_BUILD_TESTS=OFF",
             "-DTILESTREAM_BUILD_BENCH=OFF", "-DTILESTREAM_BUILD_APPS=OFF", "-DTILESTREAM_BUILD_BLAS=OFF",
             "-DTILESTREAM_WITH_MPI=OFF", *shlex.split(os.environ.get("TILESTREAM_CMAKE_ARGS", ""))])
    run(["cmake", "--build", build_dir, "--target", "tilestream_python", "-j", str(os.cpu_count() or 1)])
    return build_dir


def build_tree_libraries(module, build_dir):
    """{soname: path} of the libraries the module loads from the build tree (ldd)."""
    out = subprocess.run(["ldd", module], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        parts = line.split("=>")
        if len(parts) == 2 and parts[1].split():
            path = pathlib.Path(parts[1].split()[0])
            if path.is_absolute() and build_dir in path.resolve().parents:
                found[parts[0].strip()] = path
    return found


def runpath(path):
    """The RUNPATH (or RPATH) entries of an ELF file, [] when it has none (readelf, from binutils)."""
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    m = re.search(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.*)\]", out)
    return m.group(1).split(":") if m else []


def outside(entries, build_dir):
    """The entries that name a folder outside the build tree (empty entries, meaning the working
    directory, and $ORIGIN-relative ones from the build go too)."""
    kept = []
    for e in entries:
        if e and os.path.isabs(e) and build_dir != pathlib.Path(e).resolve() and \
                build_dir not in pathlib.Path(e).resolve().parents:
            kept.append(e)
    return kept


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", type=pathlib.Path, required=True)
    parser.add_argument("--build-dir", type=pathlib.Path, required=True)
    parser.add_argument("--out-dir", type=pathlib.Path, required=True)
    parser.add_argument("--libraries", nargs="*", default=[])
    args = parser.parse_args()
    existing = os.environ.get("TILESTREAM_CMAKE_BUILD_DIR")
    build_dir = pathlib.Path(existing) if existing else build(args.source_dir.resolve(), args.build_dir.resolve())
    build_dir = build_dir.resolve()
    module = build_dir / "python" / "tilestream" / f"_tilestream{SUFFIX}"
    if not module.exists():
        built = sorted(p.name for p in module.parent.glob("_tilestream*")) if module.parent.exists() else []
        fail(f"{module} is not there" + (f" (found {', '.join(built)}: built for another Python; configure that build "
                                         f"with -DPython3_EXECUTABLE={sys.executable})" if built else
                                         " (build the target tilestream_python there first)"))
    needed = build_tree_libraries(module, build_dir)
    unlisted = sorted(set(needed) - set(args.libraries))
    if unlisted:
        fail(f"the extension needs {', '.join(unlisted)} from the build tree, which python/meson.build does not list "
             f"in `libraries`: add them there")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name in args.libraries:
        if name not in needed:
            fail(f"python/meson.build lists {name}, which the extension does not load from the build tree")
        shutil.copyfile(needed[name], args.out_dir / name)  # the file itself, not a symbolic link
    # The backend modules libtilestream loads on first use (dlopen, not ldd's list) from its own folder.
    core = needed.get("libtilestream.so.0")
    backends = args.out_dir / "backends"
    backends.mkdir(exist_ok=True)
    modules = [m for m in BACKEND_MODULES if core and (core.parent / m).exists()]
    for name in modules:
        shutil.copyfile(core.parent / name, backends / name)
    target = args.out_dir / module.name
    shutil.copyfile(module, target)
    # CMake's own ELF editor (no patchelf needed). The extension: only $ORIGIN, so the libraries
    # copied beside it. The libraries: their entries outside the build tree (CUDA's folder, say).
    edits = [f'file(RPATH_SET FILE "{target}" NEW_RPATH "$ORIGIN")']
    for path in [args.out_dir / name for name in args.libraries] + [backends / name for name in modules]:
        entries = runpath(path)
        kept = outside(entries, build_dir)
        if path.parent == backends:
            kept = ["$ORIGIN/.."] + kept  # libtilestream.so.0 lies one folder up
        if kept != entries:
            edits.append(f'file(RPATH_SET FILE "{path}" NEW_RPATH "{":".join(kept)}")' if kept else
                         f'file(RPATH_REMOVE FILE "{path}")')
    script = args.out_dir / "set_rpath.cmake"
    script.write_text("\n".join(edits) + "\n")
    run(["cmake", "-P", script])
    script.unlink()


if __name__ == "__main__":
    main()
