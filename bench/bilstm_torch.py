#!/usr/bin/env python3
"""bilstm_torch.py -- the PyTorch peers of bench_bilstm.c: the BiLSTM tagger
of src/models/bilstm.h on the same sentences and the same weights.

  packed  nn.LSTM(E, H, bidirectional=True) over the batch as one packed
          sequence (pack_padded_sequence of the embedded words, lengths
          sorted in the plan: PyTorch's best configuration for variable
          lengths, no padding computed), then one Linear + log_softmax over
          the packed rows
  loop    the same modules called sentence by sentence

Weights: the safetensors file written by sheaf_model_save (emb, W_fwd,
b_fwd, W_bwd, b_bwd, W_tag, b_tag; x.W convention, PyTorch gate order).
nn.LSTM gets weight_ih = W[:E]^T, weight_hh = W[E:]^T, bias_ih = b,
bias_hh = 0. Sentences: the file bench_bilstm.c writes: "sents N", then one
sentence per line "n w0 w1 ..." (embedding rows).

Settings (the peer's best): eval(), torch.inference_mode(),
torch.set_num_threads(T), OMP/MKL/OpenBLAS thread counts from the caller's
environment (OMP_WAIT_POLICY=PASSIVE at 2 threads); the plan (id tensors,
lengths, sort order) is built before timing, as a collate function would.

Prints "# ..." configuration lines and one JSON object per measurement:
{"system", "batch", "threads", "hidden", "sents_per_s"}. --check FILE
writes the tag log-probabilities of the first --check-count sentences'
words, float32, loop then packed (batches of 64). Exit status 3 when torch
cannot be imported. The flags, the banner, the weights reader and the timing
windows are torch_peer.py's (shared with the other model peers).
"""
import argparse

import torch_peer


def load_sents(path):
    sents = []
    with open(path) as f:
        head = f.readline().split()
        if len(head) != 2 or head[0] != "sents":
            raise SystemExit(f"{path}: expected 'sents N' on the first line")
        for line in f:
            v = list(map(int, line.split()))
            sents.append(v[1:1 + v[0]])
    return sents


class Tagger:
    def __init__(self, w, torch):
        nn = torch.nn
        self.t = torch
        E = w["emb"].shape[1]
        H = w["W_fwd"].shape[1] // 4
        self.H = H
        self.emb = nn.Embedding.from_pretrained(w["emb"], freeze=True)
        self.lstm = nn.LSTM(E, H, bidirectional=True, batch_first=True)
        self.tag = nn.Linear(2 * H, w["W_tag"].shape[1])
        with torch.no_grad():
            for sfx, W, b in (("", "W_fwd", "b_fwd"), ("_reverse", "W_bwd", "b_bwd")):
                getattr(self.lstm, "weight_ih_l0" + sfx).copy_(w[W][:E].t())
                getattr(self.lstm, "weight_hh_l0" + sfx).copy_(w[W][E:].t())
                getattr(self.lstm, "bias_ih_l0" + sfx).copy_(w[b])
                getattr(self.lstm, "bias_hh_l0" + sfx).zero_()
            self.tag.weight.copy_(w["W_tag"].t())
            self.tag.bias.copy_(w["b_tag"])
        for m in (self.emb, self.lstm, self.tag):
            m.eval()

    def plan(self, sents):
        t = self.t
        order = sorted(range(len(sents)), key=lambda i: -len(sents[i]))
        L = len(sents[order[0]])
        ids = t.zeros(len(sents), L, dtype=t.long)
        for r, i in enumerate(order):
            ids[r, :len(sents[i])] = t.tensor(sents[i], dtype=t.long)
        lengths = t.tensor([len(sents[i]) for i in order], dtype=t.long)
        packed_ids = t.nn.utils.rnn.pack_padded_sequence(ids, lengths, batch_first=True,
                                                         enforce_sorted=True)
        return packed_ids, order

    def packed(self, plan):
        t = self.t
        packed_ids, _ = plan
        x = t.nn.utils.rnn.PackedSequence(self.emb(packed_ids.data), packed_ids.batch_sizes)
        out, _ = self.lstm(x)
        return t.log_softmax(self.tag(out.data), -1), out

    def packed_by_sentence(self, sents):
        """Packed outputs in sentence order (for the check)."""
        t = self.t
        plan = self.plan(sents)
        y, out = self.packed(plan)
        padded, lengths = t.nn.utils.rnn.pad_packed_sequence(
            t.nn.utils.rnn.PackedSequence(y, out.batch_sizes), batch_first=True)
        rows = [None] * len(sents)
        for r, i in enumerate(plan[1]):
            rows[i] = padded[r, :lengths[r]]
        return t.cat(rows, 0)

    def plan_loop(self, sents):
        return [self.t.tensor(s, dtype=self.t.long).view(1, -1) for s in sents]

    def loop(self, ids_list):
        t = self.t
        ys = []
        for ids in ids_list:
            out, _ = self.lstm(self.emb(ids))
            ys.append(t.log_softmax(self.tag(out[0]), -1))
        return ys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sents", required=True)
    torch_peer.common_args(ap, "loop,packed", "loop",
                           "batch sizes at which to time the per-sentence loop (default: "
                           "all; its work per sentence does not depend on the batch)")
    args = ap.parse_args()
    torch = torch_peer.import_torch(args.threads)
    m = Tagger(torch_peer.load_safetensors(args.weights, torch), torch)
    sents = load_sents(args.sents)
    with torch.inference_mode():
        if args.check:
            c = min(args.check_count, len(sents))
            loop = torch.cat(m.loop(m.plan_loop(sents[:c])), 0)
            packed = torch.cat([m.packed_by_sentence(sents[i:min(i + 64, c)])
                                for i in range(0, c, 64)], 0)
            torch_peer.write_check(args.check, loop, packed)
        loop_batches = torch_peer.batch_set(args.loop_batches or args.batches)
        for b in map(int, args.batches.split(",")):
            groups = [sents[i:i + b] for i in range(0, len(sents), b)]
            for system in args.systems.split(","):
                if system == "loop" and b not in loop_batches:
                    continue
                if system == "loop":
                    r = torch_peer.rate(m.loop, [m.plan_loop(g) for g in groups], len(sents),
                                        args.min_time, args.rounds)
                else:
                    r = torch_peer.rate(m.packed, [m.plan(g) for g in groups], len(sents),
                                        args.min_time, args.rounds)
                torch_peer.emit(system, b, args.threads, m.H, "sents_per_s", r)


if __name__ == "__main__":
    main()
