#!/usr/bin/env python3
"""export_encoder.py -- writes a PyTorch transformer encoder's weights as a
safetensors file that sheaf_encoder_load reads.

  # a randomly initialised encoder (seeded), e.g. CoRa's configuration:
  python3 scripts/export_encoder.py --out enc.safetensors \\
      --d-model 512 --nhead 8 --dim-feedforward 2048 --layers 6 [--activation gelu] [--seed 0]
  # the encoder inside a saved model (torch.save of a module or a state_dict):
  python3 scripts/export_encoder.py --out enc.safetensors --checkpoint model.pt \\
      --prefix encoder. --nhead 12

From Python: export(module, path), module an nn.TransformerEncoder or an
nn.TransformerEncoderLayer (written as layer 0).

Tensor names are those of nn.TransformerEncoder's state_dict, for layer i:

  layers.i.self_attn.in_proj_weight   [3d, d]   rows: W_q ; W_k ; W_v
  layers.i.self_attn.in_proj_bias     [3d]
  layers.i.self_attn.out_proj.weight  [d, d]
  layers.i.self_attn.out_proj.bias    [d]
  layers.i.linear1.weight             [ff, d]
  layers.i.linear1.bias               [ff]
  layers.i.linear2.weight             [d, ff]
  layers.i.linear2.bias               [d]
  layers.i.norm1.weight / .bias       [d]     (after attention + residual)
  layers.i.norm2.weight / .bias       [d]     (after the FFN + residual)

all F32, plus metadata: format=sheaf-encoder, d_model, nhead,
dim_feedforward, num_layers, activation (relu|gelu), layer_norm_eps,
norm_first (Sheaf runs post-LN only and refuses norm_first=true).
Needs only torch (no safetensors package).
"""
import argparse
import json
import os
import struct
import sys

import torch
from torch import nn


def _write(path, tensors, meta):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        raw = t.detach().to(torch.float32).contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
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


def _activation_name(layer):
    act = getattr(layer, "activation", None)
    if act is None or act is torch.nn.functional.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is torch.nn.functional.gelu or isinstance(act, nn.GELU):
        return "gelu"
    raise ValueError(f"unsupported activation {act!r}: Sheaf runs relu or gelu")


def export(module, path):
    """Writes an nn.TransformerEncoder or nn.TransformerEncoderLayer."""
    layers = list(module.layers) if isinstance(module, nn.TransformerEncoder) else [module]
    if isinstance(module, nn.TransformerEncoder) and module.norm is not None:
        raise ValueError("the encoder's final norm is not part of the layer stack; export it apart")
    first = layers[0]
    tensors = {}
    for i, layer in enumerate(layers):
        for name, t in layer.state_dict().items():
            tensors[f"layers.{i}.{name}"] = t
    meta = {
        "format": "sheaf-encoder",
        "d_model": first.self_attn.embed_dim,
        "nhead": first.self_attn.num_heads,
        "dim_feedforward": first.linear1.out_features,
        "num_layers": len(layers),
        "activation": _activation_name(first),
        "layer_norm_eps": first.norm1.eps,
        "norm_first": str(bool(first.norm_first)).lower(),
    }
    _write(path, tensors, meta)
    return meta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--checkpoint", help="torch.save'd module or state_dict")
    ap.add_argument("--prefix", default="", help="state_dict prefix of the encoder, e.g. 'encoder.'")
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--nhead", type=int, default=8)
    ap.add_argument("--dim-feedforward", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--activation", default="relu", choices=["relu", "gelu"])
    ap.add_argument("--layer-norm-eps", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.checkpoint:
        obj = torch.load(a.checkpoint, map_location="cpu", weights_only=False)
        sd = obj.state_dict() if isinstance(obj, nn.Module) else obj
        sd = {k[len(a.prefix):]: v for k, v in sd.items() if k.startswith(a.prefix)}
        n = 0
        while f"layers.{n}.self_attn.in_proj_weight" in sd:
            n += 1
        if n == 0:
            sys.exit(f"export_encoder.py: no '{a.prefix}layers.0.self_attn.in_proj_weight' in {a.checkpoint}")
        d = sd["layers.0.self_attn.in_proj_weight"].shape[1]
        ff = sd["layers.0.linear1.weight"].shape[0]
        layer = nn.TransformerEncoderLayer(d, a.nhead, ff, dropout=0.0, activation=a.activation,
                                           layer_norm_eps=a.layer_norm_eps, batch_first=True)
        enc = nn.TransformerEncoder(layer, n, enable_nested_tensor=False)
        enc.load_state_dict({k: v for k, v in sd.items() if k.startswith("layers.")}, strict=True)
    else:
        torch.manual_seed(a.seed)
        layer = nn.TransformerEncoderLayer(a.d_model, a.nhead, a.dim_feedforward, dropout=0.0,
                                           activation=a.activation, layer_norm_eps=a.layer_norm_eps,
                                           batch_first=True)
        enc = nn.TransformerEncoder(layer, a.layers, enable_nested_tensor=False)
    meta = export(enc, a.out)
    print(f"{a.out}: " + ", ".join(f"{k}={v}" for k, v in meta.items()))


if __name__ == "__main__":
    main()
