#!/bin/sh
# install_tvm.sh — makes Apache TVM (PyPI apache-tvm, its CPU/LLVM target)
# importable by the codegen peers bench (bench/codegen_tvm.py), in a virtual
# environment under build/peers/venv (shared with install_halide.sh; it
# sees the system site packages, so NumPy comes from there when present).
# Idempotent: does nothing when `import tvm` works in that environment.
# Every network step has a time limit. Prints the interpreter to use on
# stdout's last line; exit 0 when tvm imports, 1 otherwise (the bench then
# names TVM as not installed). PYTHON=... picks the base interpreter.
PY=${PYTHON:-python3}
VENV=${PEERS_VENV:-build/peers/venv}
PIP_NET="--timeout 30 --retries 2"
VPY="$VENV/bin/python"

have() { "$VPY" -c 'import tvm, numpy; from tvm import te' >/dev/null 2>&1; }

if ! [ -x "$VPY" ]; then
  if ! command -v "$PY" >/dev/null 2>&1; then
    echo "install_tvm: $PY not found; install Python 3 first" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv --system-site-packages "$VENV" >/dev/null 2>&1 || {
    echo "install_tvm: could not create a virtual environment at $VENV ($PY -m venv failed; apt-get install -y python3-venv)" >&2
    exit 1
  }
fi
if have; then
  echo "$VPY"
  exit 0
fi
echo "install_tvm: installing apache-tvm into $VENV (pip)" >&2
# shellcheck disable=SC2086
timeout 900 "$VPY" -m pip install --quiet $PIP_NET apache-tvm numpy >&2 || true
if have; then
  echo "$VPY"
  exit 0
fi
echo "install_tvm: could not install apache-tvm (pip install apache-tvm in $VENV failed or 'import tvm' fails; see above)" >&2
exit 1
