// decoder_dynet.cc — the DyNet peer of bench_dynamic.c's decoder rows: the
// seq2seq decoder of src/models/decoder.h (BiLSTM encoder, bilinear
// attention, input-feeding LSTM decoder; greedy, or beam search with
// src/models/beam.h's rules) on the same sentences and the same weights.
// DyNet cannot suspend an instance at a value read, so it decodes one
// sentence at a time, as its own examples do: one ComputationGraph per
// sentence, and at every step an incremental forward pass to read the
// step's log-probabilities, the choice made on the host (with
// --dynet-autobatch 1 or 2 the hypotheses of a beam step batch together).
//
//   decoder_dynet --dynet-autobatch K --dynet-mem M --weights F --data F
//                 [--beam W] [--min-time S] [--rounds R] [--check FILE]
//
// SHEAF_PEER_CPU_TIME=1 in the environment: rates on the thread's CPU
// clock (bench_dynamic --cpu-time), else on the wall clock.
//
// The host's pick is decoder.h's: argmax of logp + [EOS] * eos_bonus *
// (t + 1) / n * (max logp - mean logp), lowest token on ties, in double as
// there; beam search ranks as beam.h does. Sentences: "sents N", then
// "n w0 w1 ..." per sentence (source word ids). Prints "# ..." lines and one
// JSON line {"system": "dynet-abK", "batch": N, ..., "inst_per_s": R} (N:
// the sentences of a pass); --check writes one line per sentence, "LEN
// SCORE T1 .. TLEN".
#include <time.h>

#include "dynet_peer.h"

using namespace dynet;

namespace {

const unsigned V = 1001, EOS = 1000, BOS = 1001, MAX_LEN_CAP = 48;
const double EOS_BONUS = 1.0;  // decoder.h's SH_DEC_EOS_BONUS
const int MAX_WIDTH = 16;

typedef std::vector<unsigned> Sent;

std::vector<Sent> load_sents(const std::string &path) {
  std::ifstream f(path);
  std::string head;
  long n = 0;
  if (!(f >> head >> n) || head != "sents") peer::die(path + ": expected 'sents N'");
  std::vector<Sent> sents((size_t)n);
  for (auto &s : sents) {
    int len = 0;
    if (!(f >> len) || len < 1) peer::die(path + ": bad sentence");
    s.resize((size_t)len);
    for (auto &w : s)
      if (!(f >> w)) peer::die(path + ": bad word");
  }
  return sents;
}

struct Net {
  ParameterCollection pc;
  Parameter W_fwd, b_fwd, W_bwd, b_bwd, W_br, b_br, W_dec, b_dec, W_att, W_comb, b_comb, W_out, b_out;
  LookupParameter emb_src, emb_tgt;
  unsigned H, E, Vs;
  explicit Net(const peer::Safetensors &w) {
    Vs = w.dim0("emb_src");
    H = w.dim0("W_att");
    E = w.dim0("W_fwd") - H;
    emb_src = w.table(pc, "emb_src", Vs, E);
    emb_tgt = w.table(pc, "emb_tgt", V + 1, E);
    W_fwd = w.param(pc, "W_fwd", {4 * H, E + H});
    b_fwd = w.param(pc, "b_fwd", {4 * H});
    W_bwd = w.param(pc, "W_bwd", {4 * H, E + H});
    b_bwd = w.param(pc, "b_bwd", {4 * H});
    W_br = w.param(pc, "W_br", {H, 2 * H});
    b_br = w.param(pc, "b_br", {H});
    W_dec = w.param(pc, "W_dec", {4 * H, E + 2 * H});
    b_dec = w.param(pc, "b_dec", {4 * H});
    W_att = w.param(pc, "W_att", {2 * H, H});
    W_comb = w.param(pc, "W_comb", {H, 3 * H});
    b_comb = w.param(pc, "b_comb", {H});
    W_out = w.param(pc, "W_out", {V, H});
    b_out = w.param(pc, "b_out", {V});
  }
};

struct State {
  Expression h, c, att;
  bool has_c = false;
};

// One sentence's graph: the parameters, the encoder's M and s_0.
struct Dec {
  const Net &m;
  ComputationGraph &cg;
  Expression Wf, bf, Wb, bb, Wbr, bbr, Wd, bd, Wa, Wc, bc, Wo, bo, Mc, Mt;
  State s0;
  Dec(ComputationGraph &cg_, const Net &m_, const Sent &src) : m(m_), cg(cg_) {
    Wf = const_parameter(cg, m.W_fwd), bf = const_parameter(cg, m.b_fwd);
    Wb = const_parameter(cg, m.W_bwd), bb = const_parameter(cg, m.b_bwd);
    Wbr = const_parameter(cg, m.W_br), bbr = const_parameter(cg, m.b_br);
    Wd = const_parameter(cg, m.W_dec), bd = const_parameter(cg, m.b_dec);
    Wa = const_parameter(cg, m.W_att);
    Wc = const_parameter(cg, m.W_comb), bc = const_parameter(cg, m.b_comb);
    Wo = const_parameter(cg, m.W_out), bo = const_parameter(cg, m.b_out);
    size_t n = src.size();
    Expression zero = zeros(cg, {m.H});
    std::vector<Expression> fw(n), enc(n);
    Expression h = zero, c;
    for (size_t t = 0; t < n; t++) {
      cell(Wf, bf, concatenate({const_lookup(cg, m.emb_src, row(src[t])), h}), h, c, t > 0);
      fw[t] = h;
    }
    Expression h_last = h;
    h = zero;
    for (size_t k = 0; k < n; k++) {
      size_t t = n - 1 - k;
      cell(Wb, bb, concatenate({const_lookup(cg, m.emb_src, row(src[t])), h}), h, c, k > 0);
      enc[t] = concatenate({fw[t], h});
    }
    Mc = concatenate_cols(enc);  // {2H, n}
    Mt = transpose(Mc);          // {n, 2H}
    s0.h = tanh(affine_transform({bbr, Wbr, concatenate({h_last, h})}));
    s0.att = zero;
  }
  unsigned row(unsigned w) const { return w >= m.Vs - 1 ? m.Vs - 1 : w; }
  // sheaf_lstm_cell: z = W x + b (gates i, f, g, o); no c_prev: zeros.
  void cell(const Expression &W, const Expression &b, const Expression &x, Expression &h, Expression &c,
            bool has_c) {
    unsigned H = m.H;
    Expression z = affine_transform({b, W, x});
    Expression ifg = logistic(pick_range(z, 0, 2 * H));
    Expression g = tanh(pick_range(z, 2 * H, 3 * H));
    Expression o = logistic(pick_range(z, 3 * H, 4 * H));
    Expression ig = cmult(pick_range(ifg, 0, H), g);
    c = has_c ? cmult(pick_range(ifg, H, 2 * H), c) + ig : ig;
    h = cmult(o, tanh(c));
  }
  // One step from s fed y: the next state and logp {V}.
  Expression step(const State &s, unsigned y, State &next) {
    Expression x = concatenate({const_lookup(cg, m.emb_tgt, y), s.att, s.h});
    Expression h = s.h, c = s.c;
    cell(Wd, bd, x, h, c, s.has_c);
    Expression q = Wa * h;                  // {2H}
    Expression alpha = softmax(Mt * q);     // {n}
    Expression ctx = Mc * alpha;            // {2H}
    Expression att = tanh(affine_transform({bc, Wc, concatenate({h, ctx})}));
    next.h = h, next.c = c, next.att = att, next.has_c = true;
    return log_softmax(affine_transform({bo, Wo, att}));
  }
};

unsigned max_len(size_t n) { return n > MAX_LEN_CAP / 2 ? MAX_LEN_CAP : (unsigned)(2 * n); }

double eos_bonus(const std::vector<float> &lp, unsigned t, size_t n) {
  double mx = lp[0], sum = 0;
  for (unsigned k = 0; k < V; k++) {
    mx = lp[k] > mx ? lp[k] : mx;
    sum += lp[k];
  }
  return EOS_BONUS * (double)(t + 1) / (double)n * (mx - sum / V);
}

struct Out {
  std::vector<unsigned> toks;
  double score = 0;
};

Out greedy(const Net &m, const Sent &src) {
  ComputationGraph cg;
  Dec d(cg, m, src);
  Out o;
  State s = d.s0;
  unsigned y = BOS, L = max_len(src.size());
  for (unsigned t = 0; t < L; t++) {
    State nx;
    Expression lp = d.step(s, y, nx);
    s = nx;
    std::vector<float> v = as_vector(cg.incremental_forward(lp));
    double bonus = eos_bonus(v, t, src.size()), bv = v[0];
    unsigned best = 0;
    for (unsigned k = 1; k < V; k++) {
      double x = (double)v[k] + (k == EOS ? bonus : 0.0);
      if (x > bv) bv = x, best = k;
    }
    y = best;
    o.toks.push_back(y);
    o.score += v[y];
    if (y == EOS) break;
  }
  o.score = (float)o.score;
  return o;
}

struct Hyp {
  State s;
  unsigned y = BOS;
  bool ended = false;
  double score = 0;
  std::vector<unsigned> toks;
};
struct Cand {
  double score;
  int parent;
  int tok;
};
bool better(const Cand &a, const Cand &b) {
  if (a.score != b.score) return a.score > b.score;
  if (a.parent != b.parent) return a.parent < b.parent;
  return a.tok < b.tok;
}
void consider(std::vector<Cand> &top, int w, const Cand &c) {
  if ((int)top.size() == w && !better(c, top.back())) return;
  if ((int)top.size() < w) top.push_back(c);
  else top.back() = c;
  for (size_t i = top.size() - 1; i > 0 && better(top[i], top[i - 1]); i--) std::swap(top[i], top[i - 1]);
}

Out beam(const Net &m, const Sent &src, int width) {
  ComputationGraph cg;
  Dec d(cg, m, src);
  unsigned L = max_len(src.size());
  std::vector<Hyp> bm(1);
  bm[0].s = d.s0;
  for (unsigned t = 0;; t++) {
    bool live = false;
    for (auto &h : bm) live |= !h.ended;
    if (!live) break;
    std::vector<State> next(bm.size());
    std::vector<Expression> lp(bm.size());
    Expression last;
    for (size_t b = 0; b < bm.size(); b++)
      if (!bm[b].ended) last = lp[b] = d.step(bm[b].s, bm[b].y, next[b]);
    cg.incremental_forward(last);  // every live hypothesis' step (autobatched)
    std::vector<Cand> top;
    for (size_t b = 0; b < bm.size(); b++) {
      if (bm[b].ended) {
        consider(top, width, {bm[b].score, (int)b, -1});
        continue;
      }
      std::vector<float> v = as_vector(lp[b].value());
      double bonus = eos_bonus(v, t, src.size());
      for (unsigned k = 0; k < V; k++)
        consider(top, width, {bm[b].score + (double)v[k] + (k == EOS ? bonus : 0.0), (int)b, (int)k});
    }
    std::vector<Hyp> nb(top.size());
    for (size_t i = 0; i < top.size(); i++) {
      const Hyp &par = bm[top[i].parent];
      Hyp &h = nb[i];
      h.toks = par.toks;
      h.score = top[i].score;
      if (top[i].tok < 0) {
        h.s = par.s, h.y = par.y, h.ended = true;
        continue;
      }
      h.s = next[top[i].parent];
      h.y = (unsigned)top[i].tok;
      h.toks.push_back(h.y);
      h.ended = h.y == EOS || h.toks.size() >= L;
    }
    bm.swap(nb);
  }
  Out o;
  o.toks = bm[0].toks;
  o.score = (float)bm[0].score;
  return o;
}

}  // namespace

int main(int argc, char **argv) {
  // --beam W is ours; the rest goes to peer::parse. SHEAF_PEER_CPU_TIME=1
  // (bench_dynamic --cpu-time): rates on the thread's CPU clock.
  int width = 0;
  bool cpu = peer::cpu_time_env();
  std::vector<char *> args;
  for (int i = 0; i < argc; i++) {
    if (i + 1 < argc && !std::strcmp(argv[i], "--beam")) {
      width = std::atoi(argv[++i]);
      continue;
    }

    args.push_back(argv[i]);
  }
  if (width < 0 || width > MAX_WIDTH) peer::die("--beam: 0 (greedy) .. 16");
  int ac = (int)args.size();
  args.push_back(nullptr);
  peer::Opts o = peer::parse(ac, args.data(), "--data");
  peer::banner(o);
  std::printf("# decoder, %s%s\n", width ? ("beam search, width " + std::to_string(width)).c_str() : "greedy",
              cpu ? "; rates on the thread's CPU clock" : "");
  peer::Safetensors w(o.weights);
  Net m(w);
  std::vector<Sent> sents = load_sents(o.data);
  size_t N = sents.size();
  auto run = [&](size_t i) { return width ? beam(m, sents[i], width) : greedy(m, sents[i]); };
  if (!o.check.empty()) {
    FILE *f = std::fopen(o.check.c_str(), "w");
    if (!f) peer::die("cannot write " + o.check);
    for (size_t i = 0; i < N; i++) {
      Out r = run(i);
      std::fprintf(f, "%zu %.9g", r.toks.size(), r.score);
      for (unsigned t : r.toks) std::fprintf(f, " %u", t);
      std::fprintf(f, "\n");
    }
    if (std::fclose(f)) peer::die("cannot write " + o.check);
  }
  auto pass = [&] {
    for (size_t i = 0; i < N; i++) run(i);
  };
  double r = peer::rate(pass, (int)N, o.min_time, o.rounds, cpu);
  peer::emit((int)N, m.H, "inst_per_s", r);
  return 0;
}
