#!/usr/bin/env python3
"""encoder_torch.py -- the PyTorch peer of bench_encoder, and the PyTorch
reference of tests/test_ragged_encoder.c. Same weights (a safetensors file
with nn.TransformerEncoder state_dict names, see scripts/export_encoder.py),
same inputs.

  encoder_torch.py info
      prints "INFO ..." lines: torch version, threads, BLAS/oneDNN config.
  encoder_torch.py check WEIGHTS IN OUT [WEIGHTS IN OUT ...]
      IN holds x [N, d] (F32, the packed tokens) and lens [B] (I64); runs the
      encoder padded with src_key_padding_mask (eval, no_grad) and writes the
      packed output y [N, d] to OUT.
  encoder_torch.py bench WEIGHTS CASES [--reps R] [--warmup W] [--budget S] [--systems a,b]
      CASES: one line per batch, "ID SEED len0 len1 ...". The input of a case
      is x[t, j] = 2 * u(SEED, t*d + j) over the packed tokens t (u below, the
      same generator as bench_encoder.c). Times each system (best of R, the
      systems interleaved; after 2 rounds, stops once a round exceeds S
      seconds per system) and prints "RESULT ID SYSTEM MS CHECKSUM" with
      CHECKSUM = sum over valid tokens of y * x (float64).
      Systems: padded  nn.TransformerEncoderLayer per layer, batch_first,
                       padded to the longest + src_key_padding_mask
               nested  nn.TransformerEncoder(enable_nested_tensor=True) on the
                       same padded input + mask (the nested-tensor fast path)
               loop    one sequence at a time, no padding, no mask

Threads: torch.set_num_threads(T) with T from OMP_NUM_THREADS (the caller
sets OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS, and
OMP_WAIT_POLICY=PASSIVE for 2 threads, before Python starts).
"""
import json
import os
import struct
import sys
import time

import torch
from torch import nn

DTYPES = {"F32": torch.float32, "I64": torch.int64, "F64": torch.float64, "I32": torch.int32}


def st_read(path):
    """A minimal safetensors reader: (tensors by name, metadata)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {}) or {}
    base = 8 + n
    out = {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        dt = DTYPES[info["dtype"]]
        buf = bytearray(data[base + a:base + b])
        t = torch.frombuffer(buf, dtype=dt) if b > a else torch.empty(0, dtype=dt)
        out[name] = t.reshape(info["shape"]).clone()
    return out, meta


def st_write(path, tensors, meta=None):
    """A minimal safetensors writer (F32 / I64 tensors, in the given order)."""
    names = {torch.float32: "F32", torch.int64: "I64", torch.float64: "F64", torch.int32: "I32"}
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.contiguous().cpu()
        raw = t.numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if meta:
        header["__metadata__"] = {k: str(v) for k, v in meta.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def build(weights_path, nested):
    w, meta = st_read(weights_path)
    n_layers = 0
    while f"layers.{n_layers}.self_attn.in_proj_weight" in w:
        n_layers += 1
    d = w["layers.0.self_attn.in_proj_weight"].shape[1]
    ff = w["layers.0.linear1.weight"].shape[0]
    nhead = int(meta["nhead"])
    act = meta.get("activation", "relu")
    eps = float(meta.get("layer_norm_eps", "1e-5"))
    layer = nn.TransformerEncoderLayer(d, nhead, ff, dropout=0.0, activation=act,
                                       layer_norm_eps=eps, batch_first=True, norm_first=False)
    enc = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=nested)
    enc.load_state_dict(w, strict=True)
    enc.eval()
    return enc, d


def pad(x, lens):
    """Packed [N, d] tokens -> padded [B, T, d] and the padding mask [B, T]."""
    B, T, d = len(lens), max(lens) if lens else 0, x.shape[1]
    xp = x.new_zeros((B, T, d))
    mask = torch.ones((B, T), dtype=torch.bool)
    o = 0
    for b, L in enumerate(lens):
        xp[b, :L] = x[o:o + L]
        mask[b, :L] = False
        o += L
    return xp, mask


def unpad(yp, lens):
    return torch.cat([yp[b, :L] for b, L in enumerate(lens)], 0)


def run_padded(enc, xp, mask):
    y = xp
    for layer in enc.layers:
        y = layer(y, src_key_padding_mask=mask)
    return y


def run_nested(enc, xp, mask):
    y = enc(xp, src_key_padding_mask=mask)
    if y.is_nested:
        y = y.to_padded_tensor(0.0, xp.shape)
    return y


def run_loop(enc, xs):
    out = []
    for x in xs:
        y = x.unsqueeze(0)
        for layer in enc.layers:
            y = layer(y)
        out.append(y[0])
    return out


def u_hash(seed, n):
    """u(seed, i) for i < n: splitmix64 of seed*golden + i, top 24 bits in [-0.5, 0.5)."""
    import numpy as np
    with np.errstate(over="ignore"):
        x = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.arange(n, dtype=np.uint64)
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    v = (z >> np.uint64(40)).astype(np.float32) * np.float32(1.0 / (1 << 24)) - np.float32(0.5)
    return torch.from_numpy(v)


def info():
    print(f"INFO torch {torch.__version__} threads {torch.get_num_threads()} "
          f"interop {torch.get_num_interop_threads()}")
    cfg = torch.__config__.show().splitlines()
    keep = [l.strip() for l in cfg if any(k in l for k in ("BLAS_INFO", "LAPACK_INFO", "CPU capability",
                                                              "Intel(R) oneAPI", "OpenMP", "MKL",
                                                              "USE_MKLDNN", "CXX_FLAGS"))]
    for l in keep[:8]:
        print("INFO config " + l[:160])
    print(f"INFO mkldnn {torch.backends.mkldnn.is_available()} mkl {torch.backends.mkl.is_available()}")
    sys.stdout.flush()


def set_threads():
    t = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    if t > 0:
        torch.set_num_threads(t)


def cmd_check(wpath, inpath, outpath):
    set_threads()
    enc, d = build(wpath, nested=False)
    t, _ = st_read(inpath)
    x, lens = t["x"], [int(v) for v in t["lens"].tolist()]
    xp, mask = pad(x, lens)
    with torch.no_grad():
        y = unpad(run_padded(enc, xp, mask), lens) if x.shape[0] else x.clone()
    st_write(outpath, {"y": y.contiguous()})


def cmd_bench(wpath, cases_path, reps, warmup, budget, systems):
    set_threads()
    info()
    enc, d = build(wpath, nested=False)
    enc_n, _ = build(wpath, nested=True)
    print(f"INFO nested_fast_path {getattr(enc_n, 'use_nested_tensor', 'unknown')}")
    sys.stdout.flush()
    for line in open(cases_path):
        parts = line.split()
        if len(parts) < 3:
            continue
        cid, seed, lens = parts[0], int(parts[1]), [int(v) for v in parts[2:]]
        n = sum(lens)
        x = (2.0 * u_hash(seed, n * d)).reshape(n, d)
        xp, mask = pad(x, lens)
        xs = [x[o:o + L] for o, L in zip([sum(lens[:i]) for i in range(len(lens))], lens)]
        fns = {
            "padded": lambda: unpad(run_padded(enc, xp, mask), lens),
            "nested": lambda: unpad(run_nested(enc_n, xp, mask), lens),
            "loop": lambda: torch.cat(run_loop(enc, xs), 0),
        }
        best, chk = {}, {}
        with torch.inference_mode():
            for s in systems:
                try:
                    for _ in range(warmup):
                        y = fns[s]()
                    chk[s] = float((y.double() * x.double()).sum())
                    best[s] = float("inf")
                except Exception as e:  # the nested path may be missing
                    print(f"INFO {s} unavailable: {type(e).__name__}: {str(e)[:120]}")
            start = time.perf_counter()
            for r in range(reps):
                for s in list(best):
                    t0 = time.perf_counter()
                    fns[s]()
                    best[s] = min(best[s], time.perf_counter() - t0)
                if r >= 1 and time.perf_counter() - start > budget * max(1, len(best)):
                    break
        for s in systems:
            if s in best:
                print(f"RESULT {cid} {s} {best[s] * 1e3:.4f} {chk[s]:.9g}")
            else:
                print(f"RESULT {cid} {s} nan nan")
        sys.stdout.flush()


def main(argv):
    if len(argv) >= 1 and argv[0] == "info":
        set_threads()
        info()
        return 0
    if len(argv) >= 4 and len(argv) % 3 == 1 and argv[0] == "check":
        for i in range(1, len(argv), 3):
            cmd_check(argv[i], argv[i + 1], argv[i + 2])
        return 0
    if len(argv) >= 3 and argv[0] == "bench":
        reps, warmup, budget, systems = 3, 1, 1e9, ["padded", "nested", "loop"]
        i = 3
        while i < len(argv):
            if argv[i] == "--reps":
                reps = int(argv[i + 1]); i += 2
            elif argv[i] == "--warmup":
                warmup = int(argv[i + 1]); i += 2
            elif argv[i] == "--budget":
                budget = float(argv[i + 1]); i += 2
            elif argv[i] == "--systems":
                systems = argv[i + 1].split(","); i += 2
            else:
                raise SystemExit(f"encoder_torch.py: unknown flag {argv[i]}")
        cmd_bench(argv[1], argv[2], reps, warmup, budget, systems)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
