#!/usr/bin/env python3
"""Writes tests/data/st/python.safetensors with the reference safetensors
writer (the Rust core behind `pip install safetensors numpy`). The file is
committed so the C tests need no Python; re-run this only to regenerate it:

    python3 tests/data/st/make_python_file.py

Every value is a deterministic function of arange(), mirrored by the
expectations in tests/test_safetensors.c (test st_reads_python_file).
"""
import os

import numpy as np
import safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "python.safetensors")

# A tensor name that needs JSON escapes: quotes, a backslash, a newline, a
# tab and non-ASCII text.
ODD_NAME = 'odd."quoted"\\path\n\t\u00e9\u4e2d'


def bf16(a):
    """float32 -> bfloat16 bit patterns (exact for these values)."""
    return (np.asarray(a, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


TENSORS = {
    # name: (dtype, shape, numpy array holding the raw bytes)
    "f32": ("F32", [2, 3], (np.arange(6, dtype=np.float32) * 0.5 - 1.0)),
    "bf16": ("BF16", [2, 4], bf16(np.arange(8, dtype=np.float32) * 0.25)),
    "f16": ("F16", [5], np.arange(5, dtype=np.float16) - 2),
    "i64": ("I64", [4], np.arange(4, dtype=np.int64) * -3 + 2**40),
    "u8": ("U8", [7], (np.arange(7, dtype=np.int64) * 37 % 256).astype(np.uint8)),
    "flags": ("BOOL", [3], np.array([True, False, True])),
    "scalar": ("F64", [], np.array(3.25, dtype=np.float64)),
    "empty": ("F32", [0, 3], np.zeros((0, 3), dtype=np.float32)),
    ODD_NAME: ("F32", [2], np.array([1.5, -2.5], dtype=np.float32)),
}
METADATA = {"format": "np", "note": 'line1\nline2 "q" \u00e9'}

TORCH_NAMES = {"F32": "float32", "F64": "float64", "F16": "float16", "BF16": "bfloat16",
               "I64": "int64", "U8": "uint8", "BOOL": "bool"}


def main():
    arrays = {k: np.ascontiguousarray(v[2]) for k, v in TENSORS.items()}
    if hasattr(safetensors, "TensorSpec"):  # safetensors >= 0.8
        specs = {k: safetensors.TensorSpec(dtype=TORCH_NAMES[d], shape=s, data_ptr=arrays[k].ctypes.data,
                                           data_len=arrays[k].nbytes)
                 for k, (d, s, _) in TENSORS.items()}
        safetensors.serialize_file(specs, OUT, metadata=METADATA)
    else:  # older: dicts with raw bytes
        specs = {k: {"dtype": d, "shape": s, "data": arrays[k].tobytes()}
                 for k, (d, s, _) in TENSORS.items()}
        safetensors.serialize_file(specs, OUT, metadata=METADATA)
    print(OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
