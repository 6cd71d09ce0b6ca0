#!/usr/bin/env python3
"""train_torch.py -- the PyTorch peer of bench_train.c: the BiLSTM tagger
trained on the same sentences with the same sizes and optimizer.

  loop    per sentence: nn.LSTM(E, H, bidirectional=True) over one
          sentence at a time, Linear, summed cross-entropy; one backward
          and one Adam step per batch of sentences (the mean token loss)
  packed  the batch as one packed sequence (pack_padded_sequence of the
          embedded words, enforce_sorted=False: PyTorch's best CPU
          configuration for variable lengths, no padding computed), one
          Linear + cross-entropy over the packed rows

Corpus: the file bench_train.c writes: "corpus N V", then one sentence per
line "n w_0 .. w_{n-1} t_0 .. t_{n-1}". Batches of --batch sentences in file
order (wrapping), one warm-up update, then --updates timed updates; the
best of --reps runs. torch.set_num_threads(--threads). Prints "# ..."
lines and one JSON line per system: {"system": S, "sents_per_s": R}.
Exit status 3 when torch cannot be imported.
"""
import argparse
import json
import sys
import time


def load(path):
    with open(path) as f:
        head = f.readline().split()
        if len(head) != 3 or head[0] != "corpus":
            raise SystemExit(f"{path}: expected 'corpus N V' on the first line")
        V = int(head[2])
        sents = []
        for line in f:
            v = list(map(int, line.split()))
            n = v[0]
            sents.append((v[1:1 + n], v[1 + n:1 + 2 * n]))
    return V, sents


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--updates", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--embed", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--systems", default="loop,packed")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit(3)
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    nn = torch.nn
    V, sents = load(a.corpus)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} thread(s)", flush=True)

    def batches(n):
        out = []
        for u in range(n):
            out.append([sents[(u * a.batch + i) % len(sents)] for i in range(a.batch)])
        return out

    # the input tensors are built before timing, as a data loader would
    plan = batches(a.updates + 1)
    loop_plan = [[(torch.tensor(w), torch.tensor(t)) for w, t in b] for b in plan]
    packed_plan = []
    for b in plan:
        ids = [torch.tensor(w) for w, _ in b]
        tags = [torch.tensor(t) for _, t in b]
        lengths = torch.tensor([len(w) for w, _ in b])
        pids = nn.utils.rnn.pack_sequence(ids, enforce_sorted=False)
        ptags = nn.utils.rnn.pack_sequence(tags, enforce_sorted=False)
        packed_plan.append((pids, ptags.data, lengths))

    for system in a.systems.split(","):
        best = float("inf")
        for _ in range(a.reps):
            emb = nn.Embedding(V, a.embed)
            lstm = nn.LSTM(a.embed, a.hidden, bidirectional=True, batch_first=True)
            lin = nn.Linear(2 * a.hidden, 17)
            params = list(emb.parameters()) + list(lstm.parameters()) + list(lin.parameters())
            opt = torch.optim.Adam(params, lr=1e-3)

            def step_loop(b):
                opt.zero_grad()
                total = 0
                ntok = 0
                for w, t in b:
                    out, _ = lstm(emb(w).unsqueeze(0))
                    total = total + nn.functional.cross_entropy(lin(out[0]), t, reduction="sum")
                    ntok += len(t)
                (total / ntok).backward()
                opt.step()

            def step_packed(b):
                pids, tags, _ = b
                opt.zero_grad()
                x = nn.utils.rnn.PackedSequence(emb(pids.data), pids.batch_sizes, pids.sorted_indices,
                                                pids.unsorted_indices)
                out, _ = lstm(x)
                nn.functional.cross_entropy(lin(out.data), tags).backward()
                opt.step()

            step, p = (step_loop, loop_plan) if system == "loop" else (step_packed, packed_plan)
            step(p[0])
            t0 = time.perf_counter()
            for b in p[1:]:
                step(b)
            best = min(best, time.perf_counter() - t0)
        print(json.dumps({"system": "torch-" + system, "sents_per_s": a.updates * a.batch / best}), flush=True)


if __name__ == "__main__":
    main()
