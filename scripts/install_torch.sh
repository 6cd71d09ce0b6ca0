#!/bin/sh
# install_torch.sh — makes `python3 -c 'import torch, numpy'` work, for the PyTorch
# peers of bench-treelstm, bench-bilstm and bench-encoder (they need NumPy
# too: torch's .numpy() writes their check outputs). Does nothing when both
# import. Otherwise tries, in order: pip from PyPI (torch and numpy),
# pip with --break-system-packages (Debian's externally managed Python), then
# Debian's python3-torch and python3-numpy (apt-get, as root). Only PyPI and
# Debian's archive are used, and every step has a time limit (pip's
# --timeout plus `timeout` around each command), so no step waits on an
# unreachable host. Exit 0 when torch and numpy import afterwards, 1
# otherwise (the benchmarks then skip the peers with a note).
# PYTHON=... picks the interpreter (default python3).
PY=${PYTHON:-python3}
PIP_NET="--timeout 20 --retries 2"

have_torch() { "$PY" -c 'import torch, numpy' >/dev/null 2>&1; }

if have_torch; then
  exit 0
fi
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "install_torch: $PY not found; install Python 3 first (apt-get install -y python3 python3-pip)" >&2
  exit 1
fi
echo "install_torch: 'import torch, numpy' failed; installing PyTorch and NumPy" >&2
if "$PY" -m pip --version >/dev/null 2>&1; then
  # numpy alone first: a machine with torch but without numpy needs only it
  # shellcheck disable=SC2086
  timeout 600 "$PY" -m pip install --quiet $PIP_NET numpy && have_torch && exit 0
  # shellcheck disable=SC2086
  timeout 1800 "$PY" -m pip install --quiet $PIP_NET torch numpy && have_torch && exit 0
  # shellcheck disable=SC2086
  timeout 1800 "$PY" -m pip install --quiet $PIP_NET --break-system-packages torch numpy &&
    have_torch && exit 0
fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "install_torch: pip failed; trying apt-get install -y python3-torch python3-numpy" >&2
  timeout 900 apt-get install -y python3-torch python3-numpy >/dev/null 2>&1 ||
    { timeout 300 apt-get update >/dev/null 2>&1 &&
      timeout 900 apt-get install -y python3-torch python3-numpy >/dev/null 2>&1; }
  have_torch && exit 0
fi
echo "install_torch: could not install PyTorch and NumPy (tried pip and apt-get python3-torch)" >&2
exit 1
