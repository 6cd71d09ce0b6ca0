#!/usr/bin/env python3
"""export_torch.py -- writes a PyTorch model's weights under the names and in
the layout a Sheaf model (.sf) declares, so `sheaf run MODEL.sf --weights
OUT.safetensors --vocab VOCAB.txt` computes what the PyTorch model computes.

Sheaf multiplies weights from the right (x @ W, W of shape [in, out]); PyTorch
stores nn.Linear weights as [out, in]. Each rule below names the .sf
parameters it writes and the torch module (a state_dict prefix) it reads:

  --embedding EMB=MOD              EMB = MOD.weight                   [V, E]
  --linear W[,B]=MOD               W = MOD.weight^T, B = MOD.bias     [in, out], [out]
  --lstm W,B=MOD[:LAYER][:reverse] an nn.LSTM direction as one fused cell
                                   (lstm_cell(W, B, cat(x, h), c)): W =
                                   [weight_ih^T; weight_hh^T], B = bias_ih + bias_hh
                                   (gates i, f, g, o in both)
  --gru WIH,WHH,BIH,BHH=MOD[:LAYER][:reverse]
                                   an nn.GRU direction (gates r, z, n):
                                   WIH = weight_ih^T, WHH = weight_hh^T, biases as they are
  --transformer PREFIX=MOD         an nn.TransformerEncoderLayer as
                                   examples/transformer.sf names it: PREFIX + W_q, b_q,
                                   W_k, b_k, W_v, b_v, W_o, b_o, W_1, b_1, W_2, b_2,
                                   g1, be1, g2, be2 (PREFIX may be empty: '=MOD')
  --param NAME=KEY[:T]             any tensor as it is (:T transposes a matrix)

Every `param` of MODEL.sf must be written exactly once (anything else is an
error naming the parameters left over or missing); shapes are checked by
`sheaf run` against the model's declarations when it loads the file.

  python3 scripts/export_torch.py examples/bilstm.sf tagger.pt out.safetensors \\
      --embedding emb=emb --lstm W_fwd,b_fwd=lstm --lstm W_bwd,b_bwd=lstm:0:reverse \\
      --linear W_tag,b_tag=tag --itos itos.json --vocab-out vocab.txt

STATE is a torch.save'd module or state_dict. --itos FILE (a JSON list of
words, index = embedding row) writes the vocabulary as --vocab-out (one word
per line, the order `sheaf run --vocab` reads). From Python:
export(model_sf_path, state_dict, out_path, rules).

Needs only torch (no safetensors package).
"""
import argparse
import json
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_encoder import _write  # noqa: E402  (one safetensors writer for both scripts)


def sf_params(path):
    """The names of the `param` declarations of a .sf model, in order."""
    names = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"\s*param\s+([A-Za-z_][A-Za-z0-9_]*)\s*:", line.split("#", 1)[0])
            if m:
                names.append(m.group(1))
    return names


class ExportError(Exception):
    pass


def _get(sd, key):
    if key not in sd:
        near = [k for k in sd if k.split(".")[0] == key.split(".")[0]][:8]
        raise ExportError(f"no tensor '{key}' in the state_dict" + (f" (it has {', '.join(near)})" if near else ""))
    return sd[key].detach().to(torch.float32)


def _direction(spec):
    """MOD[:LAYER][:reverse] -> (MOD, 'l<LAYER>' + '_reverse'?)."""
    parts = spec.split(":")
    mod, layer, rev = parts[0], 0, False
    for p in parts[1:]:
        if p == "reverse":
            rev = True
        elif p.isdigit():
            layer = int(p)
        else:
            raise ExportError(f"'{spec}': expected MOD[:LAYER][:reverse]")
    return mod, f"l{layer}" + ("_reverse" if rev else "")


def _split(rule, n_min, n_max, what):
    if "=" not in rule:
        raise ExportError(f"--{what} {rule}: expected NAMES=MODULE")
    lhs, rhs = rule.split("=", 1)
    names = [x for x in lhs.split(",")] if lhs else []
    if not (n_min <= len(names) <= n_max) or any(not x for x in names):
        raise ExportError(f"--{what} {rule}: expected {n_min}" + (f" to {n_max}" if n_max != n_min else "")
                          + " parameter name(s) before '='")
    return names, rhs


def convert(sd, rules):
    """rules: [(kind, rule)] -> {sf name: tensor}."""
    out = {}

    def put(name, t):
        if name in out:
            raise ExportError(f"parameter '{name}' is written twice")
        out[name] = t.contiguous()

    for kind, rule in rules:
        if kind == "embedding":
            (name,), mod = _split(rule, 1, 1, kind)
            put(name, _get(sd, f"{mod}.weight"))
        elif kind == "linear":
            names, mod = _split(rule, 1, 2, kind)
            put(names[0], _get(sd, f"{mod}.weight").t())
            if len(names) > 1:
                put(names[1], _get(sd, f"{mod}.bias"))
        elif kind == "lstm":
            (w, b), spec = _split(rule, 2, 2, kind)
            mod, sfx = _direction(spec)
            wih, whh = _get(sd, f"{mod}.weight_ih_{sfx}"), _get(sd, f"{mod}.weight_hh_{sfx}")
            put(w, torch.cat([wih.t(), whh.t()], 0))
            put(b, _get(sd, f"{mod}.bias_ih_{sfx}") + _get(sd, f"{mod}.bias_hh_{sfx}"))
        elif kind == "gru":
            (wih, whh, bih, bhh), spec = _split(rule, 4, 4, kind)
            mod, sfx = _direction(spec)
            put(wih, _get(sd, f"{mod}.weight_ih_{sfx}").t())
            put(whh, _get(sd, f"{mod}.weight_hh_{sfx}").t())
            put(bih, _get(sd, f"{mod}.bias_ih_{sfx}"))
            put(bhh, _get(sd, f"{mod}.bias_hh_{sfx}"))
        elif kind == "transformer":
            if "=" not in rule:
                raise ExportError(f"--transformer {rule}: expected PREFIX=MODULE")
            pre, mod = rule.split("=", 1)
            p = f"{mod}." if mod else ""
            w_in, b_in = _get(sd, f"{p}self_attn.in_proj_weight"), _get(sd, f"{p}self_attn.in_proj_bias")
            d = w_in.shape[1]
            for i, x in enumerate("qkv"):
                put(f"{pre}W_{x}", w_in[i * d:(i + 1) * d].t())
                put(f"{pre}b_{x}", b_in[i * d:(i + 1) * d])
            put(f"{pre}W_o", _get(sd, f"{p}self_attn.out_proj.weight").t())
            put(f"{pre}b_o", _get(sd, f"{p}self_attn.out_proj.bias"))
            put(f"{pre}W_1", _get(sd, f"{p}linear1.weight").t())
            put(f"{pre}b_1", _get(sd, f"{p}linear1.bias"))
            put(f"{pre}W_2", _get(sd, f"{p}linear2.weight").t())
            put(f"{pre}b_2", _get(sd, f"{p}linear2.bias"))
            put(f"{pre}g1", _get(sd, f"{p}norm1.weight"))
            put(f"{pre}be1", _get(sd, f"{p}norm1.bias"))
            put(f"{pre}g2", _get(sd, f"{p}norm2.weight"))
            put(f"{pre}be2", _get(sd, f"{p}norm2.bias"))
        elif kind == "param":
            (name,), key = _split(rule, 1, 1, kind)
            tr = key.endswith(":T")
            t = _get(sd, key[:-2] if tr else key)
            if tr and t.dim() != 2:
                raise ExportError(f"--param {rule}: ':T' needs a matrix, '{key[:-2]}' has {t.dim()} dimensions")
            put(name, t.t() if tr else t)
        else:
            raise ExportError(f"unknown rule kind '{kind}'")
    return out


def export(model_sf, sd, path, rules, meta=None):
    """Writes the tensors of `rules` (see the module doc) for model_sf."""
    declared = sf_params(model_sf)
    if not declared:
        raise ExportError(f"{model_sf}: no 'param' declarations")
    out = convert(sd, rules)
    missing = [n for n in declared if n not in out]
    extra = [n for n in out if n not in declared]
    if missing or extra:
        msg = []
        if missing:
            msg.append(f"not written: {', '.join(missing)}")
        if extra:
            msg.append(f"not parameters of the model: {', '.join(extra)}")
        raise ExportError(f"{model_sf}: " + "; ".join(msg))
    _write(path, {n: out[n] for n in declared}, meta or {"format": "sheaf-model", "model": os.path.basename(model_sf)})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("model_sf")
    ap.add_argument("state", help="torch.save'd module or state_dict")
    ap.add_argument("out")
    for kind in ("embedding", "linear", "lstm", "gru", "transformer", "param"):
        ap.add_argument(f"--{kind}", action="append", default=[], metavar="RULE")
    ap.add_argument("--itos", help="JSON list of words (index = embedding row)")
    ap.add_argument("--vocab-out", help="write --itos as one word per line (for sheaf run --vocab)")
    a = ap.parse_args()
    rules = [(kind, r) for kind in ("embedding", "linear", "lstm", "gru", "transformer", "param")
             for r in getattr(a, kind)]
    try:
        obj = torch.load(a.state, map_location="cpu", weights_only=False)
        sd = obj.state_dict() if isinstance(obj, torch.nn.Module) else obj
        out = export(a.model_sf, sd, a.out, rules)
        if a.vocab_out:
            if not a.itos:
                raise ExportError("--vocab-out needs --itos")
            with open(a.itos, encoding="utf-8") as f:
                words = json.load(f)
            if any(not isinstance(w, str) or not w or "\n" in w for w in words):
                raise ExportError(f"{a.itos}: expected a JSON list of non-empty words")
            with open(a.vocab_out + ".tmp", "w", encoding="utf-8") as f:
                f.writelines(w + "\n" for w in words)
            os.replace(a.vocab_out + ".tmp", a.vocab_out)
    except (ExportError, OSError, RuntimeError) as e:
        sys.exit(f"export_torch.py: error: {e}")
    print(f"export_torch.py: wrote {len(out)} tensors to {a.out}")


if __name__ == "__main__":
    main()
