#!/usr/bin/env python3
"""treelstm_torch.py -- the PyTorch peers of bench_treelstm.c: the binary
TreeLSTM of src/models/treelstm.h on the same trees and the same weights.

  naive  per-node recursion (one addmm per node), tree by tree
  level  hand level-batched: the batch's nodes grouped by height; leaves as
         one batch; per level one gather (index_select of [h_l; h_r] rows)
         and one torch.addmm for every node of that height across the
         batch's trees, the cell's pointwise tail written in place

Weights: the safetensors file written by sheaf_model_save (emb, W_leaf,
b_leaf, W_node, b_node, W_out, b_out; row-vector convention x.W). Trees: the
file bench_treelstm.c writes: a first line "trees N", then one tree per line
"n w0 l0 r0 w1 l1 r1 ..." in post-order (root last), w the embedding row of
a leaf (-1 for an internal node), l and r the children's local indices (-1
for a leaf).

Settings (the peer's best): raw tensors under torch.inference_mode() (no
autograd), torch.set_num_threads(T) with OMP/MKL/OpenBLAS thread counts set
by the caller's environment (and OMP_WAIT_POLICY=PASSIVE at 2 threads); the
level plan (index tensors per batch) is built before timing, as a DataLoader
collate function would do off the critical path.

Prints "# ..." lines (torch version and configuration) and one JSON object
per measurement: {"system", "batch", "threads", "hidden", "trees_per_s"}.
--check FILE writes the log-probabilities of the first --check-count trees,
float32: naive (count x 5) then level (count x 5, batches of 64).
SHEAF_PEER_CPU_TIME=1 in the environment (bench_treelstm --cpu-time): rates on
the thread's CPU clock (torch_peer.cpu_clock; 1 thread).
Exit status 3 when torch cannot be imported. The flags, the banner, the weights reader and the timing
windows are torch_peer.py's (shared with the other model peers).
"""
import argparse

import torch_peer


def load_trees(path):
    trees = []
    with open(path) as f:
        head = f.readline().split()
        if len(head) != 2 or head[0] != "trees":
            raise SystemExit(f"{path}: expected 'trees N' on the first line")
        for line in f:
            v = list(map(int, line.split()))
            n = v[0]
            trees.append([(v[1 + 3 * i], v[2 + 3 * i], v[3 + 3 * i]) for i in range(n)])
    return trees


class Model:
    def __init__(self, w, torch):
        self.t = torch
        self.emb = w["emb"]
        self.W_leaf, self.b_leaf = w["W_leaf"], w["b_leaf"]
        self.W_node, self.b_node = w["W_node"], w["b_node"]
        self.W_out, self.b_out = w["W_out"], w["b_out"]
        self.H = self.W_node.shape[1] // 5
        # row views used by the naive code
        self.b_leaf1 = self.b_leaf.view(1, -1)
        self.b_node1 = self.b_node.view(1, -1)

    # ---------------------------------------------------------- naive
    def naive_tree(self, tree):
        t, H = self.t, self.H

        def rec(i):
            w, l, r = tree[i]
            if l < 0:
                z = t.addmm(self.b_leaf1, self.emb[w:w + 1], self.W_leaf)
                c = t.sigmoid(z[:, :H]) * t.tanh(z[:, 2 * H:])
                h = t.sigmoid(z[:, H:2 * H]) * t.tanh(c)
                return h, c
            hl, cl = rec(l)
            hr, cr = rec(r)
            z = t.addmm(self.b_node1, t.cat([hl, hr], 1), self.W_node)
            g = t.sigmoid(z[:, :4 * H])
            u = t.tanh(z[:, 4 * H:])
            c = g[:, :H] * u + g[:, H:2 * H] * cl + g[:, 2 * H:3 * H] * cr
            h = g[:, 3 * H:] * t.tanh(c)
            return h, c

        h, _ = rec(len(tree) - 1)
        return t.log_softmax(t.addmm(self.b_out, h, self.W_out), 1)

    def naive_batch(self, trees):
        return self.t.cat([self.naive_tree(tr) for tr in trees], 0)

    # ---------------------------------------------------------- level
    def plan(self, trees):
        """Nodes renumbered by height (leaves first); per level the
        interleaved child indices [l0, r0, l1, r1, ...]."""
        t = self.t
        by_level = []  # level -> list of (tree index, local node)
        heights = []
        for ti, tree in enumerate(trees):
            h = [0] * len(tree)
            for i, (w, l, r) in enumerate(tree):
                h[i] = 1 if l < 0 else 1 + max(h[l], h[r])
                while len(by_level) < h[i]:
                    by_level.append([])
                by_level[h[i] - 1].append((ti, i))
            heights.append(h)
        new_id = [dict() for _ in trees]
        k = 0
        for lv in by_level:
            for ti, i in lv:
                new_id[ti][i] = k
                k += 1
        leaves = by_level[0]
        leaf_words = t.tensor([trees[ti][i][0] for ti, i in leaves], dtype=t.long)
        levels = []
        s = len(leaves)
        for lv in by_level[1:]:
            idx = []
            for ti, i in lv:
                _, l, r = trees[ti][i]
                idx += [new_id[ti][l], new_id[ti][r]]
            levels.append((s, s + len(lv), t.tensor(idx, dtype=t.long)))
            s += len(lv)
        roots = t.tensor([new_id[ti][len(tr) - 1] for ti, tr in enumerate(trees)], dtype=t.long)
        return (k, leaf_words, levels, roots)

    def level_batch(self, plan):
        t, H = self.t, self.H
        n, leaf_words, levels, roots = plan
        Hs = t.empty(n, H)
        Cs = t.empty(n, H)
        n1 = leaf_words.shape[0]
        z = t.addmm(self.b_leaf, self.emb.index_select(0, leaf_words), self.W_leaf)
        io = t.sigmoid(z[:, :2 * H])
        c = t.mul(io[:, :H], t.tanh(z[:, 2 * H:]), out=Cs[:n1])
        t.mul(io[:, H:], t.tanh(c), out=Hs[:n1])
        for s, e, idx in levels:
            z = t.addmm(self.b_node, Hs.index_select(0, idx).view(-1, 2 * H), self.W_node)
            g = t.sigmoid(z[:, :4 * H])
            cc = Cs.index_select(0, idx).view(-1, 2, H)
            c = t.mul(g[:, :H], t.tanh(z[:, 4 * H:]), out=Cs[s:e])
            c.addcmul_(g[:, H:2 * H], cc[:, 0])
            c.addcmul_(g[:, 2 * H:3 * H], cc[:, 1])
            t.mul(g[:, 3 * H:], t.tanh(c), out=Hs[s:e])
        return t.log_softmax(t.addmm(self.b_out, Hs.index_select(0, roots), self.W_out), 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trees", required=True)
    torch_peer.common_args(ap, "naive,level", "naive",
                           "batch sizes at which to time naive (default: all; its work "
                           "per tree does not depend on the batch)")
    args = ap.parse_args()
    torch = torch_peer.import_torch(args.threads)
    clock = torch_peer.cpu_clock(args.threads)
    w = torch_peer.load_safetensors(args.weights, torch)
    trees = load_trees(args.trees)
    m = Model(w, torch)
    systems = args.systems.split(",")
    with torch.inference_mode():
        if args.check:
            c = min(args.check_count, len(trees))
            naive = m.naive_batch(trees[:c])
            level = torch.cat([m.level_batch(m.plan(trees[i:i + 64])) for i in range(0, c, 64)], 0)
            torch_peer.write_check(args.check, naive, level)
        naive_batches = torch_peer.batch_set(args.naive_batches or args.batches)
        for b in map(int, args.batches.split(",")):
            groups = [trees[i:i + b] for i in range(0, len(trees), b)]
            for system in systems:
                if system == "naive" and b not in naive_batches:
                    continue
                if system == "naive":
                    r = torch_peer.rate(m.naive_batch, groups, len(trees), args.min_time,
                                        args.rounds, clock)
                else:
                    plans = [m.plan(g) for g in groups]
                    r = torch_peer.rate(m.level_batch, plans, len(trees), args.min_time,
                                        args.rounds, clock)
                torch_peer.emit(system, b, args.threads, m.H, "trees_per_s", r)


if __name__ == "__main__":
    main()
