#!/usr/bin/env bash
# install_check.sh: cmake --install into a fresh prefix, then use the installed copy as a user would:
#   - build tests/install/hello.c out of tree with find_package(hetcomm CONFIG) and with pkg-config, run both;
#   - run the installed launcher and a perf tool from the prefix (they find libhetcomm.so through their RUNPATH);
#   - import hetcomm.torch from the prefix's Python package, where the backend was built.
#   install_check.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD=$(cd "${1:?usage: install_check.sh BUILD_DIR SOURCE_DIR}" && pwd)
SRC=$(cd "${2:?usage: install_check.sh BUILD_DIR SOURCE_DIR}" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
P=$TMP/prefix
fail() { echo "install_check: FAIL: $*" >&2; exit 1; }

cmake --install "$BUILD" --prefix "$P" >"$TMP/install.log" || { cat "$TMP/install.log"; fail "cmake --install"; }
lib=$(ls "$P"/lib*/libhetcomm.so.0 2>/dev/null | head -1)
[ -n "$lib" ] || fail "no libhetcomm.so.0 under $P"
soname=$(objdump -p "$lib" | awk '/SONAME/ { print $2 }')
[ "$soname" = libhetcomm.so.0 ] || fail "SONAME is '$soname', not libhetcomm.so.0"
for f in include/hetcomm/hetcomm.h include/hetcomm/hetcomm.hpp bin/hetcomm-run bin/all_reduce_perf; do
  [ -e "$P/$f" ] || fail "$f not installed"
done
echo "install_check: installed into $P (SONAME $soname)"

# 1. CMake package
cmake -S "$SRC/tests/install" -B "$TMP/cmake-build" -DCMAKE_PREFIX_PATH="$P" >"$TMP/cmake.log" 2>&1 \
  || { cat "$TMP/cmake.log"; fail "configuring with find_package(hetcomm CONFIG)"; }
cmake --build "$TMP/cmake-build" >"$TMP/build.log" 2>&1 || { cat "$TMP/build.log"; fail "building with hetcomm::hetcomm"; }
"$TMP/cmake-build/hello" || fail "the find_package build does not run"

# 2. pkg-config
export PKG_CONFIG_PATH=$(dirname "$lib")/pkgconfig
# shellcheck disable=SC2046 # pkg-config prints several words
cc -o "$TMP/hello-pc" "$SRC/tests/install/hello.c" $(pkg-config --cflags --libs hetcomm) \
  || fail "building with pkg-config"
LD_LIBRARY_PATH=$(pkg-config --variable=libdir hetcomm) "$TMP/hello-pc" || fail "the pkg-config build does not run"

# 3. the installed tools, from the prefix alone
"$P/bin/hetcomm-run" -np 2 "$P/bin/all_reduce_perf" -b 1K -e 64K -f 8 -n 3 -w 1 >"$TMP/perf.log" 2>&1 \
  || { cat "$TMP/perf.log"; fail "installed hetcomm-run + all_reduce_perf"; }
grep -q "Out of bounds values : 0 OK" "$TMP/perf.log" || { cat "$TMP/perf.log"; fail "installed all_reduce_perf: wrong results"; }
echo "install_check: installed hetcomm-run and all_reduce_perf run"

# 4. the Python package, where the backend was built
if ls "$P"/lib/python3/dist-packages/hetcomm/_torch_backend*.so >/dev/null 2>&1; then
  py=$(grep -E '^HETCOMM_PYTHON:' "$BUILD/CMakeCache.txt" | cut -d= -f2)
  PYTHONPATH=$P/lib/python3/dist-packages "${py:-python3}" -c \
    'import torch.distributed as d, hetcomm.torch; assert "HETCOMM" in d.Backend._plugins; print("install_check: import hetcomm.torch from the prefix: ok")' \
    || fail "import hetcomm.torch from the installed package"
fi
echo "install_check: ok"
