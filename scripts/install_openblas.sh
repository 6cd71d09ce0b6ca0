#!/bin/sh
# install_openblas.sh — makes libopenblas.so.0 loadable for bench-gemm (which
# dlopens it at run time): does nothing when it is already there, else
# installs Debian's libopenblas-dev with apt-get (as root; apt-get update
# first when the package is unknown), each step under a time limit so none
# waits on an unreachable host. Exit 0 when OpenBLAS is there afterwards, 1
# otherwise (bench-gemm then prints its OpenBLAS columns as missing).
have() { ldconfig -p 2>/dev/null | grep -q 'libopenblas\.so\.0'; }

have && exit 0
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
  echo "install_openblas: OpenBLAS missing and apt-get unavailable (not root?): apt-get install -y libopenblas-dev" >&2
  exit 1
fi
echo "install_openblas: installing libopenblas-dev (apt-get)" >&2
timeout 600 apt-get install -y --no-install-recommends libopenblas-dev >/dev/null 2>&1 ||
  { timeout 300 apt-get update >/dev/null 2>&1 &&
    timeout 600 apt-get install -y --no-install-recommends libopenblas-dev >/dev/null 2>&1; }
have && exit 0
echo "install_openblas: could not install libopenblas-dev" >&2
exit 1
