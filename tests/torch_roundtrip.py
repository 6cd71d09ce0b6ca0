#!/usr/bin/env python3
"""torch_roundtrip.py DATA N OUTDIR -- PyTorch side of tests/test_export_torch.c.

Builds three PyTorch models with seeded random weights (nothing is trained):
a BiLSTM tagger (nn.Embedding, bidirectional nn.LSTM, nn.Linear), a GRU
sentence classifier (nn.GRU) and an nn.TransformerEncoderLayer over
embeddings; runs each on the first N sentences of DATA (CoNLL-U) one
sentence at a time (no padding) and writes OUTDIR/NAME.expected in
`sheaf run`'s output format; exports each with scripts/export_torch.py for
examples/bilstm.sf, gru.sf and transformer.sf (OUTDIR/NAME.safetensors),
and the vocabulary as OUTDIR/vocab.txt ('<unk>' first, then the words of the
N sentences in order of first appearance).
"""
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
import export_torch  # noqa: E402

data, n_sent, outdir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sents, cur = [], []
with open(data, encoding="utf-8") as f:
    for line in f:
        line = line.rstrip("\n")
        if not line:
            if cur:
                sents.append(cur)
                cur = []
            if len(sents) == n_sent:
                break
            continue
        if line.startswith("#"):
            continue
        cols = line.split("\t")
        if "-" in cols[0] or "." in cols[0]:
            continue
        cur.append(cols[1])
if cur and len(sents) < n_sent:
    sents.append(cur)
itos = ["<unk>"]
stoi = {"<unk>": 0}
for s in sents:
    for w in s:
        if w not in stoi:
            stoi[w] = len(itos)
            itos.append(w)
with open(os.path.join(outdir, "vocab.txt"), "w", encoding="utf-8") as f:
    f.writelines(w + "\n" for w in itos)
V = len(itos)
torch.manual_seed(7)


def ids(s):
    return torch.tensor([stoi.get(w, 0) for w in s])


def write(name, rows_per_sentence, per_token):
    with open(os.path.join(outdir, name + ".expected"), "w") as f:
        for i, rows in enumerate(rows_per_sentence):
            for k, r in enumerate(rows):
                pre = f"{i} {k}" if per_token else f"{i}"
                f.write(pre + "".join(f" {float(v):.9g}" for v in r) + "\n")


def randomize(m, scale=0.3):
    with torch.no_grad():
        for p in m.parameters():
            p.uniform_(-scale, scale)


class Tagger(nn.Module):
    def __init__(self, E=12, H=10, T=17):
        super().__init__()
        self.emb = nn.Embedding(V, E)
        self.lstm = nn.LSTM(E, H, bidirectional=True, batch_first=True)
        self.tag = nn.Linear(2 * H, T)

    def forward(self, x):
        h, _ = self.lstm(self.emb(x).unsqueeze(0))
        return torch.log_softmax(self.tag(h[0]), -1)


class GRUClassifier(nn.Module):
    def __init__(self, E=12, H=10, C=5):
        super().__init__()
        self.emb = nn.Embedding(V, E)
        self.gru = nn.GRU(E, H, batch_first=True)
        self.out = nn.Linear(H, C)

    def forward(self, x):
        _, h = self.gru(self.emb(x).unsqueeze(0))
        return torch.log_softmax(self.out(h[0, 0]), -1).unsqueeze(0)


class Encoder(nn.Module):
    def __init__(self, D=32, F=48):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.layer = nn.TransformerEncoderLayer(D, 4, F, dropout=0.0, batch_first=True)

    def forward(self, x):
        return self.layer(self.emb(x).unsqueeze(0))[0]


models = {
    "bilstm": (Tagger(), True, [("embedding", "emb=emb"), ("lstm", "W_fwd,b_fwd=lstm"),
                                ("lstm", "W_bwd,b_bwd=lstm:0:reverse"), ("linear", "W_tag,b_tag=tag")]),
    "gru": (GRUClassifier(), False, [("embedding", "emb=emb"), ("gru", "W_ih,W_hh,b_ih,b_hh=gru"),
                                     ("linear", "W_out,b_out=out")]),
    "transformer": (Encoder(), True, [("embedding", "emb=emb"), ("transformer", "=layer")]),
}
for name, (m, per_token, rules) in models.items():
    randomize(m)
    if name == "transformer":
        with torch.no_grad():
            m.layer.norm1.weight.add_(1.0)
            m.layer.norm2.weight.add_(1.0)
    m.eval()
    with torch.no_grad():
        write(name, [m(ids(s)) for s in sents], per_token)
    export_torch.export(os.path.join("examples", name + ".sf"), m.state_dict(),
                        os.path.join(outdir, name + ".safetensors"), rules)
print("torch_roundtrip: ok")
