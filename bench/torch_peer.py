"""torch_peer.py -- what the PyTorch peers of the model benchmarks share
(bench/treelstm_torch.py, bench/bilstm_torch.py; imported from the script's
own folder): the common flags, importing torch with the caller's thread
count and printing its configuration banner, reading the safetensors file
that sheaf_model_save writes, the throughput windows, the JSON records.

The peer protocol (read by bench/bench_util.c): "# ..." lines are
echoed by the benchmark, one JSON object per line is a measurement, exit
status 3 means torch cannot be imported.
"""
import json
import os
import struct
import sys
import time


def common_args(ap, systems, slow, slow_help):
    """The flags every peer takes; `slow` names the per-instance system
    (--SLOW-batches: the batch sizes at which to time it)."""
    ap.add_argument("--weights", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batches", default="1,10,64")
    ap.add_argument("--systems", default=systems)
    ap.add_argument(f"--{slow}-batches", default=None, help=slow_help)
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--check")
    ap.add_argument("--check-count", type=int, default=64)


def import_torch(threads):
    """torch with `threads` intra-op threads, after a "# torch ..." banner
    (version, BLAS, oneDNN, CPU capability, thread settings); exits 3 when
    torch or numpy cannot be imported."""
    try:
        import numpy  # noqa: F401 -- write_check's .numpy() needs it (scripts/install_torch.sh)
        import torch
    except Exception as e:  # noqa: BLE001 -- any import failure means "no peer"
        print(f"# torch or numpy not importable: {e} (scripts/install_torch.sh installs both)")
        sys.exit(3)
    torch.set_num_threads(threads)
    cfg = torch.__config__.show()
    blas = "MKL" if "BLAS_INFO=mkl" in cfg else ("OpenBLAS" if "openblas" in cfg.lower() else "?")
    isa = [l.split(":")[-1].strip() for l in cfg.splitlines() if "CPU capability" in l]
    print(f"# torch {torch.__version__}, BLAS {blas}, oneDNN {torch.backends.mkldnn.is_available()}, "
          f"CPU capability {isa[0] if isa else '?'}, threads {torch.get_num_threads()} "
          f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, "
          f"MKL_NUM_THREADS={os.environ.get('MKL_NUM_THREADS')}, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'default')})")
    sys.stdout.flush()
    return torch


def load_safetensors(path, torch):
    """Every F32 tensor of a safetensors file, by name (copies)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    buf = bytearray(data)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise SystemExit(f"{path}: tensor {name}: dtype {info['dtype']}, expected F32")
        a, b = info["data_offsets"]
        t = torch.frombuffer(buf, dtype=torch.float32, count=(b - a) // 4, offset=base + a)
        out[name] = t.reshape(info["shape"]).clone()
    return out


def rate(fn, items, n, min_time, rounds, clock=time.perf_counter):
    """Best instances/s over `rounds` windows of at least min_time seconds
    on `clock` (default the wall clock; cpu_clock() for the thread's CPU
    time), each made of whole passes over `items` (n instances per pass),
    after one warm-up call (allocator, oneDNN/MKL init)."""
    fn(items[0])
    best = 0.0
    for _ in range(rounds):
        passes = 0
        t0 = clock()
        while True:
            for it in items:
                fn(it)
            passes += 1
            dt = clock() - t0
            if dt >= min_time:
                break
        best = max(best, passes * n / dt)
    return best


def cpu_clock(threads):
    """The clock a peer times with: time.thread_time when the benchmark asks
    for CPU time (SHEAF_PEER_CPU_TIME=1 in the environment: bench_treelstm
    --cpu-time; at 1 thread torch runs every op on this thread), printing
    "# rates on the thread's CPU clock"; else the wall clock. More threads
    than one would leave their time uncounted: exits 2."""
    if os.environ.get("SHEAF_PEER_CPU_TIME", "0") in ("", "0"):
        return time.perf_counter
    if threads != 1:
        sys.exit("SHEAF_PEER_CPU_TIME=1 times one thread: --threads 1, not %d" % threads)
    print("# rates on the thread's CPU clock")
    sys.stdout.flush()
    return time.thread_time


def batch_set(s):
    """"1,10,64" as a set of ints."""
    return set(map(int, s.split(",")))


def write_check(path, a, b):
    """Two output tensors, float32, one after the other (the benchmark
    compares each with Sheaf's outputs)."""
    with open(path, "wb") as f:
        f.write(a.contiguous().numpy().tobytes())
        f.write(b.contiguous().numpy().tobytes())


def emit(system, batch, threads, hidden, key, value):
    """One measurement as a JSON line."""
    print(json.dumps({"system": "pytorch-" + system, "batch": batch, "threads": threads,
                      "hidden": hidden, key: round(value, 2)}))
    sys.stdout.flush()
