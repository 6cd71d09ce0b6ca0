"""codegen_tvm.py — TVM (PyPI apache-tvm, its CPU/LLVM target) on the shapes
of bench_codegen: GEMM C[M, N] = A[M, K]·B[K, N] (M = 64 and 1600; K, N =
256, 1280 and 512, 2048), softmax rows and layernorm rows (64 × 768). Each
kernel is written in TE, scheduled by hand in TVM's schedulable TIR
(tiling, vectorize, unroll, compute_at) and, for the GEMM, the best of a
small grid of register tiles measured here (seconds, not a MetaSchedule
run). One thread (TVM_NUM_THREADS=1), thread CPU time (as bench_codegen
measures Sheaf), best of rounds; every result checked against NumPy.

Output and the --serve protocol (bench_codegen_peers drives it as a
co-process, alternating its rounds with Sheaf's): bench/codegen_serve.py.

  python3 bench/codegen_tvm.py [--quick] [--serve]
"""
import os
import sys
import time

import codegen_serve as serve

os.environ.setdefault("TVM_NUM_THREADS", "1")

QUICK = "--quick" in sys.argv


def missing(why):
    print("peer-missing tvm %s" % why.replace("\n", " ")[:300], flush=True)
    sys.exit(0)


try:
    import numpy as np
    import tvm
    from tvm import te
except Exception as e:  # noqa: BLE001 - any import failure means "not installed"
    missing("import failed: %s" % e)


def host_mcpu():
    """The host CPU as LLVM names it (gcc -march=native's answer)."""
    try:
        import subprocess
        out = subprocess.run(["cc", "-march=native", "-Q", "--help=target"], capture_output=True,
                             text=True, timeout=30).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "-march=":
                return parts[1]
    except Exception:  # noqa: BLE001
        pass
    return None


MCPU = host_mcpu()
TARGET = tvm.target.Target({"kind": "llvm", "mtriple": "x86_64-unknown-linux-gnu",
                            **({"mcpu": MCPU} if MCPU else {})})
DEV = tvm.cpu()


def tensor(a):
    return tvm.runtime.tensor(a, DEV)


def best_time(fn, min_s, args=()):
    """Best thread CPU seconds per call over rounds of about min_s each
    (the calling thread runs the kernel: one thread, no parallel loops)."""
    fn(*args)
    t = time.thread_time()
    fn(*args)
    one = max(time.thread_time() - t, 1e-6)
    reps = max(1, int(min_s / 3 / one))
    best = 1e30
    for _ in range(3 if QUICK else 5):
        t = time.thread_time()
        for _ in range(reps):
            fn(*args)
        best = min(best, (time.thread_time() - t) / reps)
    return best


def relerr(got, ref):
    return float(np.max(np.abs(got - ref) / np.maximum(1.0, np.abs(ref))))


def gemm_func(M, K, N, mi, nj, ku):
    """C = A·B with B pre-packed in panels P[N / nj, K, nj] (packed once,
    outside the timing, as Sheaf's hand GEMM packs a weight once)."""
    A = te.placeholder((M, K), name="A")
    P = te.placeholder((N // nj, K, nj), name="P")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * P[j // nj, k, j % nj], axis=k), name="C")
    sch = tvm.s_tir.Schedule(te.create_prim_func([A, P, C]))
    blk = sch.get_sblock("C")
    i, j, kk = sch.get_loops(blk)
    io, ii = sch.split(i, [None, mi])
    jo, ji = sch.split(j, [None, nj])
    ko, ki = sch.split(kk, [None, ku])
    sch.reorder(jo, io, ko, ki, ii, ji)
    # the mi × nj tile accumulates in a local buffer (registers), written back after k
    cw = sch.cache_write(blk, 0, "local")
    sch.reverse_compute_at(cw, io)
    sch.unroll(ki)
    sch.unroll(ii)
    sch.vectorize(ji)
    sch.decompose_reduction(blk, ko)
    sch.vectorize(sch.get_loops(cw)[-1])
    return tvm.compile(sch.mod, target=TARGET)


def run_gemm(M, K, N, rng):
    a = rng.uniform(-1, 1, (M, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, N)).astype("float32")
    ref = a.astype("float64") @ b.astype("float64")
    grid = [(2, 32, 4), (4, 16, 1), (4, 32, 1), (2, 32, 1), (4, 16, 4), (8, 8, 4), (2, 48, 1),
            (5, 16, 1), (5, 16, 4), (8, 16, 1), (4, 32, 4), (2, 64, 1)]
    if QUICK:
        grid = grid[:3]
    A, C = tensor(a), tensor(np.zeros((M, N), "float32"))
    best = None
    for mi, nj, ku in grid:
        if M % mi or N % nj or K % ku:
            continue
        try:
            f = gemm_func(M, K, N, mi, nj, ku)
        except Exception as e:  # noqa: BLE001 - a tile the schedule refuses is skipped
            print("# tvm gemm tile %dx%d: %s" % (mi, nj, str(e).splitlines()[-1][:120]), file=sys.stderr)
            continue
        P = tensor(b.reshape(K, N // nj, nj).transpose(1, 0, 2).copy())
        t = best_time(f, 0.05, (A, P, C))
        if best is None or t < best[0]:
            best = (t, f, P, "B packed %d-wide, tile %dx%d, k unroll %d" % (nj, mi, nj, ku))
    if best is None:
        raise RuntimeError("no GEMM tile compiled")
    f, P = best[1], best[2]
    C.copyfrom(np.zeros((M, N), "float32"))
    return (lambda: f(A, P, C)), (lambda: relerr(C.numpy(), ref)), best[3]


def row_func(op, M, N):
    x = te.placeholder((M, N), name="x")
    if op == "softmax":
        k1 = te.reduce_axis((0, N), name="k1")
        mx = te.compute((M,), lambda i: te.max(x[i, k1], axis=k1), name="mx")
        e = te.compute((M, N), lambda i, j: te.exp(x[i, j] - mx[i]), name="e")
        k2 = te.reduce_axis((0, N), name="k2")
        s = te.compute((M,), lambda i: te.sum(e[i, k2], axis=k2), name="s")
        y = te.compute((M, N), lambda i, j: e[i, j] / s[i], name="y")
        args, blocks = [x, y], ["mx", "e", "s"]
    else:
        g = te.placeholder((N,), name="g")
        b = te.placeholder((N,), name="b")
        k1 = te.reduce_axis((0, N), name="k1")
        mu = te.compute((M,), lambda i: te.sum(x[i, k1], axis=k1), name="mu")  # N · mean
        k2 = te.reduce_axis((0, N), name="k2")
        var = te.compute((M,), lambda i: te.sum((x[i, k2] - mu[i] / N) * (x[i, k2] - mu[i] / N), axis=k2),
                         name="var")  # N · variance
        y = te.compute((M, N), lambda i, j: (x[i, j] - mu[i] / N) * te.rsqrt(var[i] / N + 1e-5) * g[j] + b[j],
                       name="y")
        args, blocks = [x, g, b, y], ["mu", "var"]
    sch = tvm.s_tir.Schedule(te.create_prim_func(args))
    yb = sch.get_sblock("y")
    i, j = sch.get_loops(yb)
    jo, ji = sch.split(j, [None, 8])
    sch.vectorize(ji)
    # everything of one row under the output's row loop
    for name in reversed(blocks):
        sch.compute_at(sch.get_sblock(name), i)
    if op == "softmax":
        eb = sch.get_sblock("e")
        el = sch.get_loops(eb)
        _, ev = sch.split(el[-1], [None, 8])
        sch.vectorize(ev)
    return tvm.compile(sch.mod, target=TARGET)


def run_rows(op, M, N, rng):
    x = rng.uniform(-1, 1, (M, N)).astype("float32")
    xd = x.astype("float64")
    if op == "softmax":
        e = np.exp(xd - xd.max(axis=1, keepdims=True))
        ref = e / e.sum(axis=1, keepdims=True)
        f = row_func(op, M, N)
        X, Y = tensor(x), tensor(np.zeros((M, N), "float32"))
        args = (X, Y)
    else:
        g = rng.uniform(-1, 1, N).astype("float32")
        b = rng.uniform(-1, 1, N).astype("float32")
        mu = xd.mean(axis=1, keepdims=True)
        var = ((xd - mu) ** 2).mean(axis=1, keepdims=True)
        ref = (xd - mu) / np.sqrt(var + 1e-5) * g + b
        f = row_func(op, M, N)
        X, Y = tensor(x), tensor(np.zeros((M, N), "float32"))
        args = (X, tensor(g), tensor(b), Y)
    f(*args)
    return (lambda: f(*args)), (lambda: relerr(args[-1].numpy(), ref)), "rows, compute_at, vector 8"


JOBS = [("gemm", 64, 256, 1280), ("gemm", 64, 512, 2048), ("gemm", 1600, 256, 1280),
        ("gemm", 1600, 512, 2048), ("softmax", 64, 0, 768), ("layernorm", 64, 0, 768)]


def build(op, M, K, N, rng):
    """(call, check, schedule): call() runs the kernel once, check() is its max rel error."""
    return run_gemm(M, K, N, rng) if op == "gemm" else run_rows(op, M, N, rng)


def main():
    rng = np.random.default_rng(1)
    print("# tvm %s, target %s, 1 thread" % (tvm.__version__, TARGET), flush=True)
    serve.run("tvm", JOBS, lambda op, M, K, N: build(op, M, K, N, rng), best_time, "--serve" in sys.argv)


if __name__ == "__main__":
    main()
