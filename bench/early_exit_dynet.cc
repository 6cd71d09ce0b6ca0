// early_exit_dynet.cc — the DyNet peer of the early-exit row of
// bench-dynamic (bench/bench_dynamic_models.c): the classifier of
// src/models/early_exit.c on the same sentences and weights. DyNet reads a
// value only by running the graph forward, so each sentence is its own
// ComputationGraph: a layer of LSTM cells over the sentence, its head, an
// incremental forward to read the probabilities, then the next layer only
// if no class reached the threshold (the way a DyNet user writes early
// exit; --dynet-autobatch batches within the sentence's graph).
//
//   early_exit_dynet --dynet-autobatch K --dynet-mem M --weights F --sents F
//                    [--min-time S] [--rounds R] [--check FILE]
//
// Cell, as Sheaf's sheaf_lstm_cell: z = W [x; h] + b = [i f g o],
// c = s(f) c + s(i) tanh(g) (c = s(i) tanh(g) at the first word),
// h = s(o) tanh(c); head p = softmax(W_head h_last + b_head). The sentences
// file (bench_dynamic_models.c): "early_exit L C THRESHOLD", "sents N", then
// "LEN ROW ..." per sentence. --check writes "EXIT P0 .. P(C-1)" per
// sentence. One JSON line: {"system": "dynet-abK", "batch": 1, ...,
// "inst_per_s": R}.
// SHEAF_PEER_CPU_TIME=1 in the environment (bench_dynamic --cpu-time): rates
// on the thread's CPU clock, else on the wall clock.
#include "dynet_peer.h"

using namespace dynet;

namespace {

struct Data {
  unsigned layers = 0, classes = 0;
  float threshold = 0;
  std::vector<std::vector<unsigned>> sents;
};

Data load(const std::string &path) {
  std::ifstream f(path);
  Data d;
  std::string a, b;
  long n = 0;
  if (!(f >> a >> d.layers >> d.classes >> d.threshold) || a != "early_exit")
    peer::die(path + ": expected 'early_exit L C THRESHOLD'");
  if (!(f >> b >> n) || b != "sents") peer::die(path + ": expected 'sents N'");
  d.sents.resize((size_t)n);
  for (auto &s : d.sents) {
    long len = 0;
    if (!(f >> len) || len <= 0) peer::die(path + ": bad sentence");
    s.resize((size_t)len);
    for (auto &r : s)
      if (!(f >> r)) peer::die(path + ": bad row");
  }
  return d;
}

struct Net {
  ParameterCollection pc;
  LookupParameter emb;
  std::vector<Parameter> W, b, Wh, bh;
  unsigned H, C, L;
  float thr;
  Net(const peer::Safetensors &w, const Data &d) : L(d.layers), thr(d.threshold) {
    C = d.classes;
    H = w.dim0("W_head_0");
    emb = w.table(pc, "emb", w.dim0("emb"), H);
    for (unsigned l = 0; l < L; l++) {
      std::string s = std::to_string(l);
      W.push_back(w.param(pc, "W_" + s, {4 * H, 2 * H}));
      b.push_back(w.param(pc, "b_" + s, {4 * H}));
      Wh.push_back(w.param(pc, "W_head_" + s, {C, H}));
      bh.push_back(w.param(pc, "b_head_" + s, {C}));
    }
  }
};

// One sentence: its exit layer (1-based); probs gets the exit head's output.
int run(const Net &m, const std::vector<unsigned> &sent, std::vector<float> &probs) {
  ComputationGraph cg;
  unsigned H = m.H;
  std::vector<Expression> x;
  for (unsigned r : sent) x.push_back(const_lookup(cg, m.emb, r));
  Expression zero = zeros(cg, {H});
  unsigned l = 0;
  for (; l < m.L; l++) {
    Expression W = const_parameter(cg, m.W[l]), b = const_parameter(cg, m.b[l]);
    Expression h = zero, c;
    for (size_t t = 0; t < x.size(); t++) {
      Expression z = affine_transform({b, W, concatenate({x[t], h})});
      Expression i = logistic(pick_range(z, 0, H)), g = tanh(pick_range(z, 2 * H, 3 * H));
      c = t == 0 ? cmult(i, g) : cmult(logistic(pick_range(z, H, 2 * H)), c) + cmult(i, g);
      h = cmult(logistic(pick_range(z, 3 * H, 4 * H)), tanh(c));
      x[t] = h;
    }
    Expression p = softmax(affine_transform({const_parameter(cg, m.bh[l]), const_parameter(cg, m.Wh[l]), h}));
    probs = as_vector(cg.incremental_forward(p)); // the value read: a forward pass
    if (*std::max_element(probs.begin(), probs.end()) >= m.thr) break;
  }
  return l < m.L ? (int)l + 1 : (int)m.L;
}

}  // namespace

int main(int argc, char **argv) {
  peer::Opts o = peer::parse(argc, argv, "--sents");
  peer::banner(o);
  bool cpu = peer::cpu_time_env(); // bench_dynamic --cpu-time
  if (cpu) std::printf("# rates on the thread's CPU clock\n");
  peer::Safetensors w(o.weights);
  Data d = load(o.data);
  Net m(w, d);
  size_t N = d.sents.size();
  std::vector<float> probs;
  if (!o.check.empty()) {
    FILE *f = std::fopen(o.check.c_str(), "w");
    if (!f) peer::die("cannot write " + o.check);
    for (size_t i = 0; i < N; i++) {
      int e = run(m, d.sents[i], probs);
      std::fprintf(f, "%d", e);
      for (float p : probs) std::fprintf(f, " %.9g", p);
      std::fprintf(f, "\n");
    }
    if (std::fclose(f)) peer::die("cannot write " + o.check);
  }
  double r = peer::rate(
      [&] {
        for (size_t i = 0; i < N; i++) run(m, d.sents[i], probs);
      },
      (int)N, o.min_time, o.rounds, cpu);
  peer::emit(1, m.H, "inst_per_s", r);
  return 0;
}
