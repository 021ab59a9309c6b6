#!/usr/bin/env bash
# Build the HPCC ns-3 simulator (alibaba-edu/High-Precision-Congestion-Control, `simulation/`,
# ns-3.17 with waf 1.7) and its trace reader (`analysis/trace_reader`) outside this repository.
#
#   benchmarks/build_hpcc_ns3.sh SOURCE [DEST]
#
# SOURCE: a clone of the public repository (a work tree with simulation/ and analysis/) or a git
#         directory of it (bare or not): its HEAD is exported with `git archive`.
# DEST:   where to build (default /work/ns3); SOURCE's simulation/ and analysis/ are copied there
#         (an existing DEST/simulation is rebuilt in place).
#
# Downloads nothing. Needs python 2.7 for waf 1.7 (`python2`, or pyenv's 2.7.x, which this script
# picks with PYENV_VERSION when `python2` is pyenv's shim), g++ (12.2 tested) and make.
# Environment: JOBS (default 2), NICE (default 10).
#
# Result: DEST/simulation/build/scratch/third (run it with LD_LIBRARY_PATH=DEST/simulation/build,
# in the directory of its config: it opens every file relative to its working directory) and
# DEST/analysis/trace_reader. Measured on the project machine (2 cores, Debian 12, g++ 12.2,
# commit 9f4be2a, 2 December 2026): configure 1.6 s, build 97 s wall (168 s user + 19 s system
# CPU, -j2), trace_reader 5 s.
#
# The flags: g++ 12 needs -std=gnu++11 and -fpermissive for ns-3.17; -w silences its thousands
# of warnings. The optimized profile compiles NS_ASSERT out; add -DNS3_ASSERT_ENABLE to CXXFLAGS
# to keep the asserts (the debug profile does not build with g++ 12).
set -euo pipefail

SOURCE=${1:?usage: build_hpcc_ns3.sh SOURCE [DEST]}
DEST=${2:-/work/ns3}
JOBS=${JOBS:-2}
NICE=${NICE:-10}
CXXFLAGS=${CXXFLAGS:-"-std=gnu++11 -O2 -w -fpermissive"}

mkdir -p "$DEST"
if [ -d "$SOURCE/simulation" ] && [ -d "$SOURCE/analysis" ]; then
    commit=$(git -C "$SOURCE" rev-parse --short HEAD 2>/dev/null || echo unknown)
    cp -a "$SOURCE/simulation" "$SOURCE/analysis" "$DEST/"
elif git -C "$SOURCE" rev-parse --git-dir >/dev/null 2>&1; then
    commit=$(git -C "$SOURCE" rev-parse --short HEAD)
    git -C "$SOURCE" archive HEAD simulation analysis | tar x -C "$DEST"
else
    echo "build_hpcc_ns3.sh: $SOURCE: got neither a work tree with simulation/ and analysis/ nor" \
         "a git directory, expected the HPCC repository" >&2
    exit 1
fi
echo "HPCC commit $commit -> $DEST"

# waf 1.7 is python 2 only.
PY2=""
if command -v pyenv >/dev/null 2>&1; then
    v=$(pyenv versions --bare 2>/dev/null | grep -E '^2\.7' | tail -1 || true)
    if [ -n "$v" ]; then export PYENV_VERSION=$v; PY2="python2"; fi
fi
if [ -z "$PY2" ]; then
    for p in python2 python2.7; do
        if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import sys; sys.exit(sys.version_info[0] != 2)' 2>/dev/null; then
            PY2=$p; break
        fi
    done
fi
if [ -z "$PY2" ]; then
    echo "build_hpcc_ns3.sh: got no python 2.7 (python2, python2.7 or a pyenv 2.7.x), expected" \
         "one for waf 1.7" >&2
    exit 1
fi
echo "waf runs on $($PY2 --version 2>&1)"

cd "$DEST/simulation"
start=$(date +%s)
CXXFLAGS="$CXXFLAGS" nice -n "$NICE" "$PY2" ./waf configure --build-profile=optimized \
    --enable-modules=point-to-point,internet,applications --disable-python \
    --disable-tests --disable-examples
nice -n "$NICE" "$PY2" ./waf build -j"$JOBS"
echo "simulator built in $(( $(date +%s) - start )) s: $DEST/simulation/build/scratch/third"

cd "$DEST/analysis"
nice -n "$NICE" make trace_reader
echo "trace reader: $DEST/analysis/trace_reader"
