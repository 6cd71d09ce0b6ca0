#!/bin/sh
# install_halide.sh — makes Halide (PyPI halide, its Python bindings and autoschedulers)
# importable by the codegen peers bench (bench/codegen_halide.py), in a virtual
# environment under build/peers/venv (shared with install_tvm.sh; it
# sees the system site packages, so NumPy comes from there when present).
# Idempotent: does nothing when `import halide` works in that environment.
# Every network step has a time limit. Prints the interpreter to use on
# stdout's last line; exit 0 when halide imports, 1 otherwise (the bench then
# names Halide as not installed). PYTHON=... picks the base interpreter.
PY=${PYTHON:-python3}
VENV=${PEERS_VENV:-build/peers/venv}
PIP_NET="--timeout 30 --retries 2"
VPY="$VENV/bin/python"

have() { "$VPY" -c 'import halide, numpy' >/dev/null 2>&1; }

if ! [ -x "$VPY" ]; then
  if ! command -v "$PY" >/dev/null 2>&1; then
    echo "install_halide: $PY not found; install Python 3 first" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv --system-site-packages "$VENV" >/dev/null 2>&1 || {
    echo "install_halide: could not create a virtual environment at $VENV ($PY -m venv failed; apt-get install -y python3-venv)" >&2
    exit 1
  }
fi
if have; then
  echo "$VPY"
  exit 0
fi
echo "install_halide: installing halide into $VENV (pip)" >&2
# shellcheck disable=SC2086
timeout 900 "$VPY" -m pip install --quiet $PIP_NET halide numpy >&2 || true
if have; then
  echo "$VPY"
  exit 0
fi
echo "install_halide: could not install halide (pip install halide in $VENV failed or 'import halide' fails; see above)" >&2
exit 1
