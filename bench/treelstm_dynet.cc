// treelstm_dynet.cc — the DyNet peer of bench_treelstm.c: the binary
// TreeLSTM of src/models/treelstm.c (Tai et al. 2015) on the same trees and
// the same weights, written the way DyNet's own examples write it: one
// ComputationGraph per batch, every tree of the batch built into it, one
// forward pass on the concatenated outputs (which DyNet autobatches with
// --dynet-autobatch 1 or 2), the outputs read back to the host.
//
//   treelstm_dynet --dynet-autobatch K --dynet-mem M --weights F --trees F
//                  [--batches 1,10,64] [--min-time S] [--rounds R]
//                  [--check FILE] [--check-count N]
//
// Cell, as Sheaf's: leaf z = W_leaf x + b_leaf = [i o u], c = s(i) * tanh(u),
// h = s(o) * tanh(c); node z = W_node [h_l; h_r] + b_node = [i fl fr o u],
// c = s(i) tanh(u) + s(fl) c_l + s(fr) c_r, h = s(o) tanh(c); the root's
// log_softmax(W_out h + b_out). Trees: the file bench_treelstm.c writes
// ("trees N", then "n w l r ..." per tree, post-order, root last).
// Prints "# ..." lines and one JSON line per batch size (see dynet_peer.h);
// --check writes the first N trees' 5 log-probabilities (batches of 64).
#include "dynet_peer.h"

using namespace dynet;

namespace {

struct Node {
  int w, l, r;
};
typedef std::vector<Node> Tree;

std::vector<Tree> load_trees(const std::string &path) {
  std::ifstream f(path);
  std::string head;
  long n = 0;
  if (!(f >> head >> n) || head != "trees") peer::die(path + ": expected 'trees N'");
  std::vector<Tree> trees((size_t)n);
  for (auto &t : trees) {
    int size = 0;
    if (!(f >> size) || size <= 0) peer::die(path + ": bad tree");
    t.resize((size_t)size);
    for (auto &v : t)
      if (!(f >> v.w >> v.l >> v.r)) peer::die(path + ": bad node");
  }
  return trees;
}

struct Net {
  ParameterCollection pc;
  Parameter W_leaf, b_leaf, W_node, b_node, W_out, b_out;
  LookupParameter emb;
  unsigned H, E, C;
  explicit Net(const peer::Safetensors &w) {
    unsigned V = w.dim0("emb");
    E = w.dim0("W_leaf");
    H = w.dim0("W_node") / 2;
    C = w.dim0("b_out");
    emb = w.table(pc, "emb", V, E);
    W_leaf = w.param(pc, "W_leaf", {3 * H, E});
    b_leaf = w.param(pc, "b_leaf", {3 * H});
    W_node = w.param(pc, "W_node", {5 * H, 2 * H});
    b_node = w.param(pc, "b_node", {5 * H});
    W_out = w.param(pc, "W_out", {C, H});
    b_out = w.param(pc, "b_out", {C});
  }
};

// The batch's expressions on cg: the parameters once per graph.
struct Builder {
  const Net &m;
  Expression Wl, bl, Wn, bn, Wo, bo;
  Builder(ComputationGraph &cg, const Net &m_) : m(m_) {
    Wl = const_parameter(cg, m.W_leaf);
    bl = const_parameter(cg, m.b_leaf);
    Wn = const_parameter(cg, m.W_node);
    bn = const_parameter(cg, m.b_node);
    Wo = const_parameter(cg, m.W_out);
    bo = const_parameter(cg, m.b_out);
  }
  Expression tree(ComputationGraph &cg, const Tree &t, std::vector<Expression> &h,
                  std::vector<Expression> &c) {
    unsigned H = m.H;
    h.resize(t.size());
    c.resize(t.size());
    for (size_t i = 0; i < t.size(); i++) {
      const Node &n = t[i];
      if (n.l < 0) {
        Expression x = const_lookup(cg, m.emb, (unsigned)n.w);
        Expression z = affine_transform({bl, Wl, x});
        Expression io = logistic(pick_range(z, 0, 2 * H));
        c[i] = cmult(pick_range(io, 0, H), tanh(pick_range(z, 2 * H, 3 * H)));
        h[i] = cmult(pick_range(io, H, 2 * H), tanh(c[i]));
      } else {
        Expression z = affine_transform({bn, Wn, concatenate({h[n.l], h[n.r]})});
        Expression g = logistic(pick_range(z, 0, 4 * H));
        Expression u = tanh(pick_range(z, 4 * H, 5 * H));
        c[i] = cmult(pick_range(g, 0, H), u) + cmult(pick_range(g, H, 2 * H), c[n.l]) +
               cmult(pick_range(g, 2 * H, 3 * H), c[n.r]);
        h[i] = cmult(pick_range(g, 3 * H, 4 * H), tanh(c[i]));
      }
    }
    return log_softmax(affine_transform({bo, Wo, h.back()}));
  }
};

// Trees [first, first + n): one graph, one forward pass; the outputs
// (n x C, tree by tree) appended to *out when given.
void run_batch(const Net &m, const std::vector<Tree> &trees, size_t first, size_t n,
               std::vector<float> *out) {
  ComputationGraph cg;
  Builder b(cg, m);
  std::vector<Expression> outs, h, c;
  outs.reserve(n);
  for (size_t k = 0; k < n; k++) outs.push_back(b.tree(cg, trees[first + k], h, c));
  Expression all = outs.size() == 1 ? outs[0] : concatenate_cols(outs);
  std::vector<float> v = as_vector(cg.forward(all));
  if (out) out->insert(out->end(), v.begin(), v.end());
}

}  // namespace

int main(int argc, char **argv) {
  peer::Opts o = peer::parse(argc, argv, "--trees");
  peer::banner(o);
  peer::Safetensors w(o.weights);
  Net m(w);
  std::vector<Tree> trees = load_trees(o.data);
  size_t N = trees.size();
  if (!o.check.empty()) {
    std::vector<float> v;
    size_t cnt = std::min(N, (size_t)o.check_count);
    for (size_t i = 0; i < cnt; i += 64) run_batch(m, trees, i, std::min((size_t)64, cnt - i), &v);
    peer::write_check(o.check, v);
  }
  bool cpu = peer::cpu_time_env(); // bench_treelstm --cpu-time
  if (cpu) std::printf("# rates on the thread's CPU clock\n");
  for (int B : peer::int_list(o.batches)) {
    double r = peer::rate(
        [&] {
          for (size_t i = 0; i < N; i += (size_t)B)
            run_batch(m, trees, i, std::min((size_t)B, N - i), nullptr);
        },
        (int)N, o.min_time, o.rounds, cpu);
    peer::emit(B, m.H, "trees_per_s", r);
  }
  return 0;
}
