#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/) with clang, ASan and UBSan in build-fuzz/ and runs each
# for a bounded time on its seed corpus. Exits non-zero when any harness finds a crash (the
# input is saved as build-fuzz/artifacts/<harness>-crash-*).
# usage: scripts/fuzz.sh [seconds-per-harness (default 20)] [harness ...]
# TILESTREAM_FUZZ_PREBUILT=path/to/libtilestream.so (a Release build of this tree, as CI has): the
# harnesses link it and only the parsers they fuzz are compiled here (fuzz/CMakeLists.txt).
set -euo pipefail
seconds=${1:-20}
shift || true
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TILESTREAM_FUZZ_BUILD_DIR:-$root/build-fuzz}
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(npy device_spec bytes rates trace)

command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 2; }
if [ ! -f "$build/CMakeCache.txt" ]; then
  # -O1, as libFuzzer's documentation builds: the harnesses parse, and CI builds this whole
  # library once more with clang under ASan+UBSan (184 s of its 234 s stage on 2 cores at -O2).
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" \
    -DTILESTREAM_FUZZ=ON -DTILESTREAM_BUILD_TESTS=OFF -DTILESTREAM_BUILD_APPS=OFF -DTILESTREAM_BUILD_BENCH=OFF \
    -DTILESTREAM_WITH_CUDA=OFF -DTILESTREAM_NATIVE=OFF >/dev/null
fi
# Set (or cleared) on every run, so a build directory follows the environment it is run with.
prebuilt=${TILESTREAM_FUZZ_PREBUILT:-}
if [ -n "$prebuilt" ] && [ ! -f "$prebuilt" ]; then
  echo "fuzz.sh: TILESTREAM_FUZZ_PREBUILT=$prebuilt is not a file" >&2
  exit 2
fi
cmake -B "$build" -DTILESTREAM_FUZZ_PREBUILT="$prebuilt" >/dev/null
cmake --build "$build" -j"${FUZZ_JOBS:-2}" --target fuzz_harnesses

mkdir -p "$build/artifacts"
# One harness per core at once (each libFuzzer process keeps one core busy): on CI's 2 cores the
# five 10 s runs take 30 s instead of 50.
parallel=${FUZZ_PARALLEL:-$(nproc)}
run_harness() {
  local h=$1 scratch="$build/corpus/$1" log="$build/artifacts/$1.log" max_len
  # New inputs go to a scratch corpus; the committed seeds are only read.
  mkdir -p "$scratch"
  # Parsers of one-line options need no long inputs; files get room for a few events or elements.
  case $h in npy|trace) max_len=4096 ;; *) max_len=256 ;; esac
  # -rss_limit_mb and -timeout make a runaway allocation or a hang count as a finding.
  ASAN_OPTIONS=detect_leaks=1:malloc_context_size=2:intercept_tls_get_addr=0 UBSAN_OPTIONS=print_stacktrace=1 \
    "$build/fuzz/fuzz_$h" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
      -max_len=$max_len -artifact_prefix="$build/artifacts/$h-" "$scratch" "$root/fuzz/corpus/$h" >"$log" 2>&1
}
declare -A pid_of
for h in "${harnesses[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
  run_harness "$h" &
  pid_of[$h]=$!
done
status=0
total=0
for h in "${harnesses[@]}"; do
  log="$build/artifacts/$h.log"
  if wait "${pid_of[$h]}"; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    echo "fuzz $h: ${runs:-?} executions in ${seconds} s, no crash"
    total=$((total + ${runs:-0}))
  else
    echo "fuzz $h: FAILED (see $log)" >&2
    grep -E "ERROR|runtime error|SUMMARY|Test unit written" "$log" | head -20 >&2 || true
    status=1
  fi
done
echo "fuzz: $total executions in all"
exit $status
