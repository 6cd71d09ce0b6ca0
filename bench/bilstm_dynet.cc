// bilstm_dynet.cc — the DyNet peer of bench_bilstm.c: the BiLSTM tagger of
// src/models/bilstm.c on the same sentences and the same weights, written
// the way DyNet's own examples write it: one ComputationGraph per batch,
// every sentence of the batch built into it, one forward pass on the
// concatenated outputs (autobatched with --dynet-autobatch 1 or 2), the
// outputs read back to the host.
//
//   bilstm_dynet --dynet-autobatch K --dynet-mem M --weights F --sents F
//                [--batches 1,10,64] [--min-time S] [--rounds R]
//                [--check FILE] [--check-count N]
//
// Cell, as Sheaf's sheaf_lstm_cell (gates i, f, g, o; PyTorch's order):
// z = W [x_t; h_{t-1}] + b, c = s(f) c_{t-1} + s(i) tanh(g) (no c_{t-1} at
// the first step), h = s(o) tanh(c); h_0 = 0; forward and backward
// directions with their own W, b; per word log_softmax(W_tag [h_t; h'_t] +
// b_tag). Sentences: the file bench_bilstm.c writes ("sents N", then
// "n w0 w1 ..." per sentence). Prints "# ..." lines and one JSON line per
// batch size (see dynet_peer.h); --check writes the first N sentences'
// per-word 17 log-probabilities (batches of 64).
#include "dynet_peer.h"

using namespace dynet;

namespace {

typedef std::vector<unsigned> Sent;
typedef peer::BiLstmTagger Net;

std::vector<Sent> load_sents(const std::string &path) {
  std::ifstream f(path);
  std::string head;
  long n = 0;
  if (!(f >> head >> n) || head != "sents") peer::die(path + ": expected 'sents N'");
  std::vector<Sent> sents((size_t)n);
  for (auto &s : sents) {
    int len = 0;
    if (!(f >> len) || len < 0) peer::die(path + ": bad sentence");
    s.resize((size_t)len);
    for (auto &w : s)
      if (!(f >> w)) peer::die(path + ": bad word");
  }
  return sents;
}

// The batch's expressions on cg: the parameters once per graph.
struct Builder {
  const Net &m;
  Expression W[2], b[2], Wt, bt, zero;
  Builder(ComputationGraph &cg, const Net &m_) : m(m_) {
    for (int d = 0; d < 2; d++) {
      W[d] = const_parameter(cg, m.W[d]);
      b[d] = const_parameter(cg, m.b[d]);
    }
    Wt = const_parameter(cg, m.W_tag);
    bt = const_parameter(cg, m.b_tag);
    zero = zeros(cg, {m.H});
  }
  // One step of direction d from (h, c); has_c false at the first step.
  void step(ComputationGraph &cg, int d, unsigned w, Expression &h, Expression &c, bool has_c) {
    peer::lstm_step(W[d], b[d], const_lookup(cg, m.emb, w), m.H, h, c, has_c);
  }
  // The sentence's per-word outputs appended to outs.
  void sent(ComputationGraph &cg, const Sent &s, std::vector<Expression> &outs,
            std::vector<Expression> &fwd) {
    size_t n = s.size();
    fwd.resize(n);
    Expression h = zero, c;
    for (size_t t = 0; t < n; t++) {
      step(cg, 0, s[t], h, c, t > 0);
      fwd[t] = h;
    }
    h = zero;
    size_t base = outs.size();
    outs.resize(base + n);
    for (size_t k = 0; k < n; k++) {
      size_t t = n - 1 - k;
      step(cg, 1, s[t], h, c, k > 0);
      outs[base + t] = log_softmax(affine_transform({bt, Wt, concatenate({fwd[t], h})}));
    }
  }
};

// Sentences [first, first + n): one graph, one forward pass; the outputs
// (words x T, word by word) appended to *out when given.
void run_batch(const Net &m, const std::vector<Sent> &sents, size_t first, size_t n,
               std::vector<float> *out) {
  ComputationGraph cg;
  Builder b(cg, m);
  std::vector<Expression> outs, fwd;
  for (size_t k = 0; k < n; k++) b.sent(cg, sents[first + k], outs, fwd);
  if (outs.empty()) return;
  Expression all = outs.size() == 1 ? outs[0] : concatenate_cols(outs);
  std::vector<float> v = as_vector(cg.forward(all));
  if (out) out->insert(out->end(), v.begin(), v.end());
}

}  // namespace

int main(int argc, char **argv) {
  peer::Opts o = peer::parse(argc, argv, "--sents");
  peer::banner(o);
  peer::Safetensors w(o.weights);
  Net m(w);
  std::vector<Sent> sents = load_sents(o.data);
  size_t N = sents.size();
  if (!o.check.empty()) {
    std::vector<float> v;
    size_t cnt = std::min(N, (size_t)o.check_count);
    for (size_t i = 0; i < cnt; i += 64) run_batch(m, sents, i, std::min((size_t)64, cnt - i), &v);
    peer::write_check(o.check, v);
  }
  for (int B : peer::int_list(o.batches)) {
    double r = peer::rate(
        [&] {
          for (size_t i = 0; i < N; i += (size_t)B)
            run_batch(m, sents, i, std::min((size_t)B, N - i), nullptr);
        },
        (int)N, o.min_time, o.rounds);
    peer::emit(B, m.H, "sents_per_s", r);
  }
  return 0;
}
