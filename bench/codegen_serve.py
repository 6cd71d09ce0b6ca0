"""codegen_serve.py — the output and the co-process protocol shared by the
codegen peers (bench/codegen_tvm.py, bench/codegen_halide.py).

Each peer builds every kernel of its job list once (choosing its schedule,
checking the result against NumPy in double: a result off by more than
1e-3 fails the kernel), then either

* times each kernel itself (best of rounds) and prints, one line per kernel,
    peer SYSTEM OP M K N SECONDS_PER_CALL MAX_REL_ERR SCHEDULE
* or, with --serve, prints one line per kernel,
    ready SYSTEM OP M K N MAX_REL_ERR SCHEDULE
  then `serving`, and answers lines on stdin until `quit` or end of input:
    time OP M K N REPS   ->  t SECONDS_PER_CALL   (one call untimed, then thread CPU
                                                  time of REPS calls / REPS)
    check OP M K N       ->  err MAX_REL_ERR      (the output of the calls so far)
  so bench_codegen_peers alternates the peer's rounds with its own.

A kernel that fails prints `peer-failed SYSTEM OP M K N REASON`; a peer that
cannot import prints `peer-missing SYSTEM REASON` (and exits) instead.
"""
import sys
import time


def run(system, jobs, build, best_time, serve):
    """jobs: (op, M, K, N) tuples; build(op, M, K, N) -> (call, check, schedule)
    where call() runs the kernel once and check() is the max relative error
    of its current output against the reference."""
    built = {}
    for op, M, K, N in jobs:
        key = "%s %d %d %d" % (op, M, K, N)
        try:
            call, check, how = build(op, M, K, N)
            call()
            err = check()
        except Exception as e:  # noqa: BLE001 - one kernel failing leaves the others
            print("peer-failed %s %s %s" % (system, key, str(e).splitlines()[-1][:200] if str(e) else type(e).__name__),
                  flush=True)
            continue
        if not err <= 1e-3:
            print("peer-failed %s %s wrong results (max rel err %.1e)" % (system, key, err), flush=True)
            continue
        built[key] = (call, check)
        if serve:
            print("ready %s %s %.2e %s" % (system, key, err, how), flush=True)
        else:
            print("peer %s %s %.9f %.2e %s" % (system, key, best_time(call, 0.3), err, how), flush=True)
    if not serve:
        return
    print("serving", flush=True)
    for line in sys.stdin:
        w = line.split()
        key = " ".join(w[1:5])
        if not w or w[0] == "quit":
            break
        if key not in built:
            print("error unknown kernel %s" % key, flush=True)
        elif w[0] == "time" and len(w) == 6:
            call, reps = built[key][0], max(1, int(w[5]))
            call()  # untimed: its data back in cache after the other sides' calls
            t = time.thread_time()
            for _ in range(reps):
                call()
            print("t %.9e" % ((time.thread_time() - t) / reps), flush=True)
        elif w[0] == "check":
            print("err %.3e" % built[key][1](), flush=True)
        else:
            print("error bad request %s" % line.strip(), flush=True)
