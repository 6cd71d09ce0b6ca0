#!/usr/bin/env python3
"""train_torch.py -- the PyTorch peers of bench_train.c (the BiLSTM tagger)
and bench_train_tree.c (--model treelstm: the binary TreeLSTM), trained on
the same data with the same sizes and optimizer.

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

--model treelstm (src/models/treelstm.h: emb [V, E], W_leaf [E, 3H],
W_node [2H, 5H], W_out [H, 5]; Adam lr 2e-3; the mean NLL of a batch's
trees' classes; one backward and one step per batch):

  tree    per tree: the cells by recursion, node by node (one matmul per
          node), the batch's losses summed before one backward
  level   level-batched: the batch's nodes grouped by height (a leaf is 1);
          the leaves as one matmul, then per height one gather of the
          children's h and c from the nodes done so far and one matmul for
          every node of that height across the batch's trees

--sparse-emb (both models): the embedding's gradient sparse and its update
SparseAdam's (lazy: only the rows looked up move, their moments too), Adam
for the other parameters; without it one Adam over every parameter.
--cpu-time: time.process_time instead of the wall clock.

Corpus: "treecorpus NTRAIN NDEV V", then a tree per line "label n w0 l0 r0
..." in post-order (bench_train_tree.c writes it). After the timed updates
of the last run, the dev trees are classified (level-batched, no grad) and
the JSON line is {"system": S, "trees_per_s": R, "dev_accuracy": A}.
"""
import argparse
import json
import sys
import time

clock = time.perf_counter


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


def load_trees(path):
    with open(path) as f:
        head = f.readline().split()
        if len(head) != 4 or head[0] != "treecorpus":
            raise SystemExit(f"{path}: expected 'treecorpus NTRAIN NDEV V' on the first line")
        ntrain, V = int(head[1]), int(head[3])
        trees = []
        for line in f:
            v = list(map(int, line.split()))
            n = v[1]
            trees.append((v[0], [(v[2 + 3 * i], v[3 + 3 * i], v[4 + 3 * i]) for i in range(n)]))
    return V, trees[:ntrain], trees[ntrain:]


def tree_plan(torch, trees):
    """Per batch: nodes renumbered by height (leaves first); per height
    (start, end, child index tensor [l0, r0, l1, r1, ...]); the roots."""
    by_h, hts = [], []
    for ti, (_, tree) in enumerate(trees):
        h = [0] * len(tree)
        for i, (w, l, r) in enumerate(tree):
            h[i] = 1 if l < 0 else 1 + max(h[l], h[r])
            while len(by_h) < h[i]:
                by_h.append([])
            by_h[h[i] - 1].append((ti, i))
        hts.append(h)
    new_id = [dict() for _ in trees]
    k = 0
    for lv in by_h:
        for ti, i in lv:
            new_id[ti][i] = k
            k += 1
    leaf_words = torch.tensor([trees[ti][1][i][0] for ti, i in by_h[0]], dtype=torch.long)
    levels, s = [], len(by_h[0])
    for lv in by_h[1:]:
        idx = []
        for ti, i in lv:
            _, l, r = trees[ti][1][i]
            idx += [new_id[ti][l], new_id[ti][r]]
        levels.append((s, s + len(lv), torch.tensor(idx, dtype=torch.long)))
        s += len(lv)
    roots = torch.tensor([new_id[ti][len(tr) - 1] for ti, (_, tr) in enumerate(trees)], dtype=torch.long)
    labels = torch.tensor([lab for lab, _ in trees], dtype=torch.long)
    return leaf_words, levels, roots, labels


def main_treelstm(a, torch):
    nn, F = torch.nn, torch.nn.functional
    V, train, dev = load_trees(a.corpus)
    H, E = a.hidden, a.embed
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} thread(s)", flush=True)
    plan = [[train[(u * a.batch + i) % len(train)] for i in range(a.batch)] for u in range(a.updates + 1)]
    level_plan = [tree_plan(torch, b) for b in plan]
    dev_plan = [tree_plan(torch, dev[i:i + 256]) for i in range(0, len(dev), 256)]

    def params():
        def glorot(i, o):
            w = torch.empty(i, o)
            nn.init.xavier_uniform_(w)
            return nn.Parameter(w)
        return {"emb": nn.Parameter(torch.randn(V, E)), "W_leaf": glorot(E, 3 * H),
                "b_leaf": nn.Parameter(torch.zeros(3 * H)), "W_node": glorot(2 * H, 5 * H),
                "b_node": nn.Parameter(torch.zeros(5 * H)), "W_out": glorot(H, 5),
                "b_out": nn.Parameter(torch.zeros(5))}

    leaf_index = {}
    for b in plan:
        for _, tree in b:
            for w, l, r in tree:
                if l < 0 and w not in leaf_index:
                    leaf_index[w] = torch.tensor([w], dtype=torch.long)

    def emb_rows(p, idx):  # a sparse gradient with --sparse-emb (SparseAdam), dense otherwise
        return F.embedding(idx, p["emb"], sparse=a.sparse_emb)

    def optimizers(p):
        if not a.sparse_emb:
            return [torch.optim.Adam(list(p.values()), lr=2e-3)]
        return [torch.optim.SparseAdam([p["emb"]], lr=2e-3),
                torch.optim.Adam([v for k, v in p.items() if k != "emb"], lr=2e-3)]

    def leaf(z):
        c = torch.sigmoid(z[:, :H]) * torch.tanh(z[:, 2 * H:])
        return torch.sigmoid(z[:, H:2 * H]) * torch.tanh(c), c

    def cell(z, cl, cr):
        g = torch.sigmoid(z[:, :4 * H])
        c = g[:, :H] * torch.tanh(z[:, 4 * H:]) + g[:, H:2 * H] * cl + g[:, 2 * H:3 * H] * cr
        return g[:, 3 * H:] * torch.tanh(c), c

    def tree_logp(p, tree):
        st = [None] * len(tree)
        for i, (w, l, r) in enumerate(tree):  # post-order: children first
            if l < 0:
                st[i] = leaf(torch.addmm(p["b_leaf"], emb_rows(p, leaf_index[w]), p["W_leaf"]))
            else:
                z = torch.addmm(p["b_node"], torch.cat([st[l][0], st[r][0]], 1), p["W_node"])
                st[i] = cell(z, st[l][1], st[r][1])
        return F.log_softmax(torch.addmm(p["b_out"], st[-1][0], p["W_out"]), 1)

    def level_logp(p, pl):
        leaf_words, levels, roots, _ = pl
        h, c = leaf(torch.addmm(p["b_leaf"], emb_rows(p, leaf_words), p["W_leaf"]))
        hs, cs = [h], [c]
        for s, e, idx in levels:
            hall, call = torch.cat(hs), torch.cat(cs)
            z = torch.addmm(p["b_node"], hall.index_select(0, idx).view(-1, 2 * H), p["W_node"])
            cc = call.index_select(0, idx).view(-1, 2, H)
            h, c = cell(z, cc[:, 0], cc[:, 1])
            hs.append(h)
            cs.append(c)
        return F.log_softmax(torch.addmm(p["b_out"], torch.cat(hs).index_select(0, roots), p["W_out"]), 1)

    for system in a.systems.split(","):
        if system == "loop":
            system = "tree"
        if system == "packed":
            system = "level"
        best, acc = float("inf"), -1.0
        for _ in range(a.reps):
            torch.manual_seed(1)
            p = params()
            opts = optimizers(p)

            def step(u):
                for opt in opts:
                    opt.zero_grad()
                if system == "tree":
                    b = plan[u]
                    total = 0
                    for lab, tree in b:
                        total = total + tree_logp(p, tree)[0, lab]
                    (-total / len(b)).backward()
                else:
                    pl = level_plan[u]
                    F.nll_loss(level_logp(p, pl), pl[3]).backward()
                for opt in opts:
                    opt.step()

            step(0)
            t0 = clock()
            for u in range(1, a.updates + 1):
                step(u)
            best = min(best, clock() - t0)
            with torch.no_grad():
                right = sum(int((level_logp(p, pl).argmax(1) == pl[3]).sum()) for pl in dev_plan)
            acc = right / len(dev)
        print(json.dumps({"system": "torch-" + system, "trees_per_s": a.updates * a.batch / best,
                          "dev_accuracy": acc}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="bilstm", choices=["bilstm", "treelstm"])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--updates", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--embed", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--systems", default="loop,packed")
    ap.add_argument("--sparse-emb", action="store_true",
                    help="sparse embedding gradients and SparseAdam for the embedding (lazy: only the rows "
                         "looked up are updated, as DyNet's lookup parameters); Adam for the rest")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time on the process's CPU clock (time.process_time) instead of the wall clock")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit(3)
    torch.set_num_threads(a.threads)
    global clock
    clock = time.process_time if a.cpu_time else time.perf_counter
    torch.manual_seed(1)
    if a.model == "treelstm":
        if a.systems == "loop,packed":
            a.systems = "tree,level"
        return main_treelstm(a, torch)
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
            emb = nn.Embedding(V, a.embed, sparse=a.sparse_emb)
            lstm = nn.LSTM(a.embed, a.hidden, bidirectional=True, batch_first=True)
            lin = nn.Linear(2 * a.hidden, 17)
            params = list(lstm.parameters()) + list(lin.parameters())
            if a.sparse_emb:
                opts = [torch.optim.SparseAdam(list(emb.parameters()), lr=1e-3), torch.optim.Adam(params, lr=1e-3)]
            else:
                opts = [torch.optim.Adam(list(emb.parameters()) + params, lr=1e-3)]

            def step_loop(b):
                for opt in opts:
                    opt.zero_grad()
                total = 0
                ntok = 0
                for w, t in b:
                    out, _ = lstm(emb(w).unsqueeze(0))
                    total = total + nn.functional.cross_entropy(lin(out[0]), t, reduction="sum")
                    ntok += len(t)
                (total / ntok).backward()
                for opt in opts:
                    opt.step()

            def step_packed(b):
                pids, tags, _ = b
                for opt in opts:
                    opt.zero_grad()
                x = nn.utils.rnn.PackedSequence(emb(pids.data), pids.batch_sizes, pids.sorted_indices,
                                                pids.unsorted_indices)
                out, _ = lstm(x)
                nn.functional.cross_entropy(lin(out.data), tags).backward()
                for opt in opts:
                    opt.step()

            step, p = (step_loop, loop_plan) if system == "loop" else (step_packed, packed_plan)
            step(p[0])
            t0 = clock()
            for b in p[1:]:
                step(b)
            best = min(best, clock() - t0)
        print(json.dumps({"system": "torch-" + system, "sents_per_s": a.updates * a.batch / best}), flush=True)


if __name__ == "__main__":
    main()
