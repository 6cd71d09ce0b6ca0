#!/bin/sh
# install_torch.sh — makes `python3 -c 'import torch, numpy'` work, for the PyTorch
# peers of bench-treelstm and bench-bilstm. Does nothing when torch already
# imports. Otherwise tries, in order: pip (PyPI's CPU wheel: MKL + oneDNN,
# the stronger peer), pip with --break-system-packages (Debian's externally
# managed Python), then Debian's python3-torch (apt-get, as root). Exit 0
# when torch imports afterwards, 1 otherwise (the benchmarks then skip the
# peers with a note). PYTHON=... picks the interpreter (default python3).
PY=${PYTHON:-python3}

have_torch() { "$PY" -c 'import torch, numpy' >/dev/null 2>&1; }

if have_torch; then
  exit 0
fi
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "install_torch: $PY not found; install Python 3 first (apt-get install -y python3 python3-pip)" >&2
  exit 1
fi
echo "install_torch: 'import torch, numpy' failed; installing PyTorch (CPU) and NumPy" >&2
if "$PY" -m pip --version >/dev/null 2>&1; then
  { "$PY" -m pip install --quiet torch --index-url https://download.pytorch.org/whl/cpu &&
    "$PY" -m pip install --quiet numpy; } && have_torch && exit 0
  "$PY" -m pip install --quiet torch numpy && have_torch && exit 0
  "$PY" -m pip install --quiet --break-system-packages torch numpy && have_torch && exit 0
fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "install_torch: pip failed; trying apt-get install -y python3-torch" >&2
  apt-get install -y python3-torch python3-numpy >/dev/null 2>&1 ||
    { apt-get update >/dev/null 2>&1 && apt-get install -y python3-torch python3-numpy >/dev/null 2>&1; }
  have_torch && exit 0
fi
echo "install_torch: could not install PyTorch (tried pip and apt-get python3-torch)" >&2
exit 1
