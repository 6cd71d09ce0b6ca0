// parser_dynet.cc — the DyNet peer of the parser row of bench-dynamic
// (bench/bench_dynamic_models.c): the arc-standard shift-reduce parser of
// src/models/parser.c on the same sentences and weights. Each decision
// reads the action scores, which in DyNet is a forward pass, so each
// sentence is its own ComputationGraph, built step by step with an
// incremental forward per decision (the way DyNet's stack-LSTM parser
// examples are written; --dynet-autobatch batches within the sentence).
//
//   parser_dynet --dynet-autobatch K --dynet-mem M --weights F --sents F
//                [--min-time S] [--rounds R] [--check FILE]
//
// As parser.h: hid = tanh(W_h [r_s1; r_s0; r_b0] + b_h), score = W_a hid +
// b_a (SHIFT, LEFT, RIGHT), argmax over the legal actions (ties: the
// first), compose(h, d) = tanh(W_c [h; d] + b_c) replacing the head's
// representation. The sentences file: "sents N", then "LEN ROW ..." per
// sentence. --check writes each sentence's heads (1-based, 0 the root) on a
// line. One JSON line: {"system": "dynet-abK", "batch": 1, ..., "inst_per_s": R}.
// SHEAF_PEER_CPU_TIME=1 in the environment (bench_dynamic --cpu-time): rates
// on the thread's CPU clock, else on the wall clock.
#include "dynet_peer.h"

using namespace dynet;

namespace {

std::vector<std::vector<unsigned>> load(const std::string &path) {
  std::ifstream f(path);
  std::string a;
  long n = 0;
  if (!(f >> a >> n) || a != "sents") peer::die(path + ": expected 'sents N'");
  std::vector<std::vector<unsigned>> sents((size_t)n);
  for (auto &s : sents) {
    long len = 0;
    if (!(f >> len) || len <= 0) peer::die(path + ": bad sentence");
    s.resize((size_t)len);
    for (auto &r : s)
      if (!(f >> r)) peer::die(path + ": bad row");
  }
  return sents;
}

struct Net {
  ParameterCollection pc;
  LookupParameter emb;
  Parameter W_h, b_h, W_a, b_a, W_c, b_c;
  unsigned H;
  explicit Net(const peer::Safetensors &w) {
    H = w.dim0("W_a");
    emb = w.table(pc, "emb", w.dim0("emb"), H);
    W_h = w.param(pc, "W_h", {H, 3 * H});
    b_h = w.param(pc, "b_h", {H});
    W_a = w.param(pc, "W_a", {3, H});
    b_a = w.param(pc, "b_a", {3});
    W_c = w.param(pc, "W_c", {H, 2 * H});
    b_c = w.param(pc, "b_c", {H});
  }
};

enum { SHIFT = 0, LEFT = 1, RIGHT = 2 };

// One sentence: heads[i] = word i's head (1-based, 0 the root).
void parse(const Net &m, const std::vector<unsigned> &sent, std::vector<int> &heads) {
  ComputationGraph cg;
  Expression Wh = const_parameter(cg, m.W_h), bh = const_parameter(cg, m.b_h);
  Expression Wa = const_parameter(cg, m.W_a), ba = const_parameter(cg, m.b_a);
  Expression Wc = const_parameter(cg, m.W_c), bc = const_parameter(cg, m.b_c);
  Expression zero = zeros(cg, {m.H});
  int n = (int)sent.size();
  std::vector<Expression> r;
  for (unsigned w : sent) r.push_back(const_lookup(cg, m.emb, w));
  heads.assign((size_t)n, -1);
  std::vector<int> stack;
  int b = 0;
  while (b < n || stack.size() > 1) {
    int act = SHIFT;
    if (stack.size() >= 2) {
      int s0 = stack.back(), s1 = stack[stack.size() - 2];
      Expression hid = tanh(affine_transform({bh, Wh, concatenate({r[s1], r[s0], b < n ? r[b] : zero})}));
      std::vector<float> v = as_vector(cg.incremental_forward(affine_transform({ba, Wa, hid})));
      act = b < n ? SHIFT : LEFT;
      for (int a = act + 1; a < 3; a++)
        if (v[a] > v[act]) act = a;
    }
    if (act == SHIFT) {
      stack.push_back(b++);
    } else {
      int s0 = stack.back(), s1 = stack[stack.size() - 2];
      int head = act == LEFT ? s0 : s1, dep = act == LEFT ? s1 : s0;
      heads[dep] = head + 1;
      r[head] = tanh(affine_transform({bc, Wc, concatenate({r[head], r[dep]})}));
      stack.pop_back();
      stack.back() = head;
    }
  }
  heads[stack[0]] = 0;
}

}  // namespace

int main(int argc, char **argv) {
  peer::Opts o = peer::parse(argc, argv, "--sents");
  peer::banner(o);
  bool cpu = peer::cpu_time_env(); // bench_dynamic --cpu-time
  if (cpu) std::printf("# rates on the thread's CPU clock\n");
  peer::Safetensors w(o.weights);
  std::vector<std::vector<unsigned>> sents = load(o.data);
  Net m(w);
  size_t N = sents.size();
  std::vector<int> heads;
  if (!o.check.empty()) {
    FILE *f = std::fopen(o.check.c_str(), "w");
    if (!f) peer::die("cannot write " + o.check);
    for (size_t i = 0; i < N; i++) {
      parse(m, sents[i], heads);
      for (size_t k = 0; k < heads.size(); k++) std::fprintf(f, k ? " %d" : "%d", heads[k]);
      std::fprintf(f, "\n");
    }
    if (std::fclose(f)) peer::die("cannot write " + o.check);
  }
  double r = peer::rate(
      [&] {
        for (size_t i = 0; i < N; i++) parse(m, sents[i], heads);
      },
      (int)N, o.min_time, o.rounds, cpu);
  peer::emit(1, m.H, "inst_per_s", r);
  return 0;
}
