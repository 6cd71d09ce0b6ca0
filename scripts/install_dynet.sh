#!/bin/sh
# install_dynet.sh — builds DyNet 2.1.2's C++ library (no Python bindings)
# and the DyNet peers of the benchmarks (every bench/NAME_dynet.cc:
# treelstm and bilstm for bench-treelstm and bench-bilstm, decoder and the
# others for bench-dynamic) into a cached directory,
# DYNET_DIR (default build/peers/dynet):
#
#   DIR/dyNET-2.1.2.tar.gz   PyPI's source distribution (the full C++ tree)
#   DIR/dyNET-2.1.2, DIR/build  the sources, the CMake build (libdynet.so)
#   DIR/bin/*_dynet          the peers (rebuilt when their sources change)
#   DIR/FAILED               why the last run failed (read by the benches)
#
# Idempotent: a second run only rebuilds peers whose sources changed. Needs
# g++, cmake and Eigen (Debian's g++, cmake, libeigen3-dev: installed with
# apt-get when missing, as root). Every network step has a time limit, so no
# step waits on an unreachable host. Exit 0 when the peers are built, 1
# otherwise (the message says why; the benchmarks then print "DyNet: not
# available (why)"). JOBS=N sets the build's parallelism (default 2).
#
# The download: `pip download --no-deps --no-binary dynet dynet==2.1.2`.
# (--no-binary :all: would also build pip's build dependencies of the sdist,
# Cython and NumPy, from source to read its metadata: many minutes.)
# Eigen: DyNet 2.1.2 asks for an Eigen development snapshot, but builds
# and runs with Debian's Eigen 3.4.0 (libeigen3-dev) as it is; see
# docs/RUNTIME.md ("DyNet peer").
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${DYNET_DIR:-$ROOT/build/peers/dynet}
JOBS=${JOBS:-2}
VER=2.1.2
SDIST=$DIR/dyNET-$VER.tar.gz
SRC=$DIR/dyNET-$VER
BLD=$DIR/build
LIB=$BLD/dynet/libdynet.so
EIGEN=${EIGEN3_INCLUDE_DIR:-/usr/include/eigen3}
PY=${PYTHON:-python3}

mkdir -p "$DIR" || { echo "install_dynet: cannot create $DIR" >&2; exit 1; }
rm -f "$DIR/FAILED"
fail() {
  echo "install_dynet: $1" >&2
  echo "$1" >"$DIR/FAILED"
  exit 1
}

# 1. the toolchain and Eigen (apt-get only for what is missing)
need=""
command -v g++ >/dev/null 2>&1 || need="$need g++"
command -v cmake >/dev/null 2>&1 || need="$need cmake"
command -v make >/dev/null 2>&1 || need="$need make"
[ -f "$EIGEN/Eigen/Core" ] || need="$need libeigen3-dev"
if [ -n "$need" ]; then
  if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
    fail "missing:$need (install them: apt-get install -y$need)"
  fi
  echo "install_dynet: installing$need (apt-get)" >&2
  timeout 300 apt-get update >/dev/null 2>&1
  # shellcheck disable=SC2086
  timeout 600 apt-get install -y --no-install-recommends $need >/dev/null 2>&1 ||
    fail "apt-get install$need failed or timed out"
  [ -f "$EIGEN/Eigen/Core" ] || fail "Eigen not found in $EIGEN after installing libeigen3-dev"
fi

# 2. the library (once)
if [ ! -f "$LIB" ]; then
  if [ ! -f "$SDIST" ]; then
    echo "install_dynet: downloading DyNet $VER's source distribution (pip)" >&2
    command -v "$PY" >/dev/null 2>&1 || fail "$PY not found (pip downloads the DyNet sources)"
    timeout 600 "$PY" -m pip download --quiet --no-deps --no-binary dynet --timeout 20 --retries 2 \
      -d "$DIR" "dynet==$VER" >"$DIR/download.log" 2>&1 ||
      fail "pip download dynet==$VER failed or timed out (see $DIR/download.log)"
    [ -f "$SDIST" ] || fail "pip download gave no $SDIST (see $DIR/download.log)"
  fi
  if [ ! -f "$SRC/CMakeLists.txt" ]; then
    rm -rf "$SRC"
    tar xzf "$SDIST" -C "$DIR" || fail "cannot unpack $SDIST"
    [ -f "$SRC/CMakeLists.txt" ] || fail "$SDIST has no dyNET-$VER/CMakeLists.txt"
  fi
  echo "install_dynet: building DyNet $VER (C++ library, Eigen $EIGEN, make -j$JOBS; a few minutes)" >&2
  start=$(date +%s)
  mkdir -p "$BLD"
  (cd "$BLD" && cmake "$SRC" -DCMAKE_BUILD_TYPE=Release -DEIGEN3_INCLUDE_DIR="$EIGEN" \
     -DENABLE_BOOST=OFF -DENABLE_CPP_EXAMPLES=OFF -DENABLE_PYTHON=OFF >"$DIR/cmake.log" 2>&1) ||
    fail "cmake failed (see $DIR/cmake.log)"
  (cd "$BLD" && make -j"$JOBS" dynet >"$DIR/make.log" 2>&1) || {
    tail -n 20 "$DIR/make.log" >&2
    fail "building DyNet's library failed (see $DIR/make.log)"
  }
  [ -f "$LIB" ] || fail "the build made no $LIB (see $DIR/make.log)"
  echo "install_dynet: DyNet $VER built in $(( $(date +%s) - start )) s: $LIB" >&2
fi

# 3. the peers (again when a source is newer than the binary)
newer() { [ -n "$(find "$1" -newer "$2" 2>/dev/null)" ]; }
mkdir -p "$DIR/bin"
for src in "$ROOT"/bench/*_dynet.cc; do
  m=$(basename "$src" _dynet.cc)
  bin=$DIR/bin/${m}_dynet
  # (and when it cannot find libdynet.so: a tree copied from elsewhere)
  if [ ! -x "$bin" ] || newer "$src" "$bin" || newer "$ROOT/bench/dynet_peer.h" "$bin" ||
     newer "$LIB" "$bin" || ldd "$bin" 2>/dev/null | grep -q 'not found'; then
    echo "install_dynet: compiling $bin" >&2
    g++ -std=c++11 -O3 -march=native -DNDEBUG -DEIGEN_FAST_MATH -I"$ROOT/bench" -I"$SRC" \
      -I"$BLD" -I"$EIGEN" -o "$bin" "$src" -L"$BLD/dynet" -ldynet -Wl,-rpath,"\$ORIGIN/$(realpath --relative-to="$DIR/bin" "$BLD/dynet")" \
      >"$DIR/$m.log" 2>&1 || {
      tail -n 20 "$DIR/$m.log" >&2
      rm -f "$bin"
      fail "compiling bench/${m}_dynet.cc failed (see $DIR/$m.log)"
    }
  fi
done
exit 0
