"""codegen_halide.py — Halide (PyPI halide, JIT-compiled for the host) on the
shapes of bench_codegen: GEMM C[M, N] = A[M, K]·B[K, N] (M = 64 and 1600;
K, N = 256, 1280 and 512, 2048), softmax rows and layernorm rows (64 ×
768). Each pipeline is compiled twice: with a hand schedule (register
tiles, vectorize, unroll, compute_at; the GEMM's from Halide's own
linear-algebra apps) and with the Mullapudi2016 autoscheduler (estimates
given, parallelism 1); the faster is reported with its name. One thread
(HL_NUM_THREADS=1, no parallel loops), called through compile_to_callable,
thread CPU time, best of rounds; every result checked against NumPy.

Output and the --serve protocol (bench_codegen_peers drives it as a
co-process, alternating its rounds with Sheaf's): bench/codegen_serve.py.

  python3 bench/codegen_halide.py [--quick] [--serve]
"""
import os
import sys
import time

import codegen_serve as serve

os.environ.setdefault("HL_NUM_THREADS", "1")

QUICK = "--quick" in sys.argv


def missing(why):
    print("peer-missing halide %s" % why.replace("\n", " ")[:300], flush=True)
    sys.exit(0)


try:
    import numpy as np
    import halide as hl
except Exception as e:  # noqa: BLE001 - any import failure means "not installed"
    missing("import failed: %s" % e)

TARGET = hl.get_host_target()
AUTO = None
try:
    hl.load_plugin(os.path.join(os.path.dirname(hl.__file__), "lib64", "libautoschedule_mullapudi2016.so"))
    AUTO = "Mullapudi2016"
except Exception as e:  # noqa: BLE001
    print("# halide: no autoscheduler plugin (%s); hand schedules only" % e, file=sys.stderr)


def best_time(fn, min_s):
    fn()
    t = time.thread_time()
    fn()
    one = max(time.thread_time() - t, 1e-6)
    reps = max(1, int(min_s / 3 / one))
    best = 1e30
    for _ in range(3 if QUICK else 5):
        t = time.thread_time()
        for _ in range(reps):
            fn()
        best = min(best, (time.thread_time() - t) / reps)
    return best


def relerr(got, ref):
    return float(np.max(np.abs(got - ref) / np.maximum(1.0, np.abs(ref))))


def compile_callable(out, params, auto, estimates):
    """A callable of out's pipeline: the hand schedule already applied
    (auto False), or the autoscheduler's (auto True, estimates set)."""
    p = hl.Pipeline(out)
    if auto:
        for param, shape in estimates:
            param.set_estimates([(0, s) for s in shape])
        p.apply_autoscheduler(TARGET, hl.AutoschedulerParams(AUTO, {"parallelism": "1"}))
    return p.compile_to_callable([hl.Argument(q) for q in params], TARGET)


def gemm(M, K, N, auto):
    # Halide's dimension 0 is the innermost (NumPy's last): A(k, m), B(n, k), C(n, m)
    A = hl.ImageParam(hl.Float(32), 2, "A")
    B = hl.ImageParam(hl.Float(32), 2, "B")
    x, y, xi, yi = hl.Var("x"), hl.Var("y"), hl.Var("xi"), hl.Var("yi")
    r = hl.RDom([(0, K)])
    prod = hl.Func("prod")
    C = hl.Func("C")
    Bs = hl.Func("Bs")  # B itself; the hand schedule stages a strip of it
    Bs[x, y] = B[x, y]
    prod[x, y] = hl.f32(0)
    prod[x, y] += A[r.x, y] * Bs[x, r.x]
    C[x, y] = prod[x, y]
    if not auto:
        # each 32-column strip of B copied once to a contiguous K × 32 block
        # (packing per strip), reused by every row block of the strip
        Bs.compute_at(C, x).vectorize(x, 8)
        # a 4-row × 32-column block of C per iteration, in registers; the
        # row blocks inside a column strip, so the strip of B stays in cache
        C.tile(x, y, xi, yi, 32, 4).reorder(xi, yi, y, x).vectorize(xi, 8).unroll(yi)
        prod.compute_at(C, y).vectorize(x, 8).unroll(y)
        prod.update().reorder(x, y, r.x).vectorize(x, 8).unroll(y)
    C.set_estimates([(0, N), (0, M)])
    return compile_callable(C, [A, B], auto, [(A, (K, M)), (B, (N, K))])


def rows(op, M, N, auto):
    X = hl.ImageParam(hl.Float(32), 2, "x")
    G = hl.ImageParam(hl.Float(32), 1, "g")
    Bb = hl.ImageParam(hl.Float(32), 1, "b")
    x, y = hl.Var("x"), hl.Var("y")
    r = hl.RDom([(0, N)])
    out = hl.Func("out")
    if op == "softmax":
        mx, e, s = hl.Func("mx"), hl.Func("e"), hl.Func("s")
        mx[y] = hl.maximum(X[r.x, y])
        e[x, y] = hl.exp(X[x, y] - mx[y])
        s[y] = hl.sum(e[r.x, y])
        out[x, y] = e[x, y] / s[y]
        inner = [mx, e, s]
        params, est = [X], [(X, (N, M))]
    else:
        mu, var = hl.Func("mu"), hl.Func("var")
        mu[y] = hl.sum(X[r.x, y]) / N
        var[y] = hl.sum((X[r.x, y] - mu[y]) * (X[r.x, y] - mu[y])) / N
        out[x, y] = (X[x, y] - mu[y]) / hl.sqrt(var[y] + hl.f32(1e-5)) * G[x] + Bb[x]
        inner = [mu, var]
        params, est = [X, G, Bb], [(X, (N, M)), (G, (N,)), (Bb, (N,))]
    if not auto:
        out.vectorize(x, 8)
        for f in inner:
            f.compute_at(out, y)
        if op == "softmax":
            inner[1].vectorize(x, 8)
    out.set_estimates([(0, N), (0, M)])
    return compile_callable(out, params, auto, est)


def run(kind, M, K, N, rng):
    """(call, check, schedule) of the faster of the hand and auto schedules:
    call() runs it once, check() is its output's max rel error."""
    if kind == "gemm":
        a = rng.uniform(-1, 1, (M, K)).astype("float32")
        b = rng.uniform(-1, 1, (K, N)).astype("float32")
        ref = a.astype("float64") @ b.astype("float64")
        ins = [hl.Buffer(a), hl.Buffer(b)]
        out_np = np.zeros((M, N), "float32")
        make = lambda auto: gemm(M, K, N, auto)  # noqa: E731
    else:
        x = rng.uniform(-1, 1, (M, N)).astype("float32")
        xd = x.astype("float64")
        if kind == "softmax":
            ex = np.exp(xd - xd.max(axis=1, keepdims=True))
            ref = ex / ex.sum(axis=1, keepdims=True)
            ins = [hl.Buffer(x)]
        else:
            g = rng.uniform(-1, 1, N).astype("float32")
            bb = rng.uniform(-1, 1, N).astype("float32")
            mu = xd.mean(axis=1, keepdims=True)
            ref = (xd - mu) / np.sqrt(((xd - mu) ** 2).mean(axis=1, keepdims=True) + 1e-5) * g + bb
            ins = [hl.Buffer(x), hl.Buffer(g), hl.Buffer(bb)]
        out_np = np.zeros((M, N), "float32")
        make = lambda auto: rows(kind, M, N, auto)  # noqa: E731
    out = hl.Buffer(out_np)
    best = None
    for auto in ([False, True] if AUTO else [False]):
        name = ("autoscheduler " + AUTO) if auto else "hand schedule"
        try:
            f = make(auto)
        except Exception as e:  # noqa: BLE001 - one schedule failing leaves the other
            print("# halide %s %s: %s" % (kind, name, str(e).splitlines()[-1][:160]), file=sys.stderr)
            continue
        t = best_time(lambda: f(*ins, out), 0.2)
        err = relerr(out_np, ref)
        if err > 1e-3:
            print("# halide %s %s: wrong results (error %.1e), ignored" % (kind, name, err), file=sys.stderr)
            continue
        if best is None or t < best[0]:
            best = (t, f, name)
    if best is None:
        raise RuntimeError("no schedule compiled")
    f = best[1]
    out_np[...] = 0
    return (lambda: f(*ins, out)), (lambda: relerr(out_np, ref)), best[2]


JOBS = [("gemm", 64, 256, 1280), ("gemm", 64, 512, 2048), ("gemm", 1600, 256, 1280),
        ("gemm", 1600, 512, 2048), ("softmax", 64, 0, 768), ("layernorm", 64, 0, 768)]


def main():
    rng = np.random.default_rng(1)
    print("# halide, target %s, 1 thread" % TARGET, flush=True)
    serve.run("halide", JOBS, lambda op, M, K, N: run(op, M, K, N, rng), best_time, "--serve" in sys.argv)


if __name__ == "__main__":
    main()
