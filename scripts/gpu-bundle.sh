#!/usr/bin/env bash
# Builds tilestream for sm_90 here (a machine without a GPU, CUDA at /usr/local/cuda) and packs what
# scripts/gpu-check.sh runs into .gpu-bundle/bundle.tar.gz: the library, its CUDA and OpenCL modules,
# the test binary, the GPU benchmark, the CLI, the maps-at-exit preload, and the non-system libraries
# they link (OpenBLAS and its Fortran run time, the OpenCL loader, CLBlast), so a lent GPU machine
# spends its minutes testing instead of building. On that machine, from the repository root:
#
#   mkdir -p /work && { [ -e /work/main ] || ln -s "$PWD" /work/main; }   # the build's own paths
#   tar -xzf .gpu-bundle/bundle.tar.gz
#   LD_LIBRARY_PATH=$PWD/build-gpu/syslib:/usr/local/cuda/lib64 GPU_CHECK_PREBUILT=1 scripts/gpu-check.sh
#
# The build's paths (RUNPATH, the CLI path compiled into the tests) name this checkout, so the
# checkout must sit at the same path there (the symbolic link above does it for /work/main).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-gpu
export PATH=$PATH:/usr/local/cuda/bin
if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILESTREAM_WITH_CUDA=ON \
        -DTILESTREAM_CUDA_ARCHITECTURES=90-real -DCMAKE_CUDA_STANDARD=17 -DTILESTREAM_BUILD_TESTS=ON \
        -DTILESTREAM_BUILD_APPS=ON -DTILESTREAM_BUILD_BENCH=ON
fi
ninja -C "$build" tilestream tilestream_cuda tilestream_opencl tilestream_tests gpu_bench tilestream_cli \
    tilestream_maps_at_exit

cd "$root"
# The host LAPACK experiment (bench/gpu/host_lapack_probe.cpp; not a CMake target).
g++ -O2 -std=c++17 bench/gpu/host_lapack_probe.cpp -I/usr/include/x86_64-linux-gnu/openblas-pthread \
    -I/usr/local/cuda/include -o "$build/bench/gpu/host_lapack_probe" -L/usr/local/cuda/lib64 -lcublas -lcusolver \
    -lcudart -lopenblas -pthread
files=(build-gpu/libtilestream.so* build-gpu/libtilestream_cuda.so build-gpu/libtilestream_opencl.so
    build-gpu/tests/tilestream_tests build-gpu/tests/libtilestream_maps_at_exit.so
    build-gpu/bench/gpu/gpu_bench build-gpu/bench/gpu/host_lapack_probe build-gpu/apps/tilestream)
files+=(build-gpu/libtilestream_distributed.so*)
# The commit built (gpu-check reports it: the lent machine's copy of .git may be an older one).
hash=$(git rev-parse --short=12 HEAD)
[ -z "$(git status --porcelain --untracked-files=no)" ] || hash="$hash-dirty"
echo "$hash" >build-gpu/bundle-git-hash
rm -rf build-gpu/syslib
mkdir -p build-gpu/syslib
# Libraries the binaries link that a CUDA image may lack (OpenBLAS, gfortran, OpenCL, CLBlast, the
# CLI's Open MPI): every one ldd finds outside the C/C++ run time, CUDA and the build, under its soname.
base='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libz)\.'
for lib in $(ldd "${files[@]}" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// && $3 !~ /cuda|build-gpu/ {print $1}' |
    grep -Ev "$base" | sort -u); do
    path=$(ldd "${files[@]}" 2>/dev/null | awk -v l="$lib" '$1 == l && !seen {print $3; seen = 1}')
    cp -L "$path" "build-gpu/syslib/$lib"
    files+=("build-gpu/syslib/$lib")
done
files+=(build-gpu/bundle-git-hash)  # (after the ldd above, which a text file would fail)
mkdir -p .gpu-bundle
grep -qx '/.gpu-bundle/' .git/info/exclude 2>/dev/null || echo '/.gpu-bundle/' >>"$(git rev-parse --git-dir)/info/exclude"
tar -czf .gpu-bundle/bundle.tar.gz "${files[@]}"
echo "wrote .gpu-bundle/bundle.tar.gz ($(du -h .gpu-bundle/bundle.tar.gz | cut -f1)): ${#files[@]} files"
