// treelstm_train_dynet.cc — the DyNet training peer of bench_train_tree.c:
// the binary TreeLSTM of src/models/treelstm.h trained on the same trees,
// labels and batches, with the same sizes and optimizer (Adam lr 2e-3,
// clipping off), written the way DyNet's own examples write training: per
// batch one ComputationGraph, every tree of the batch built into it, the
// mean of the trees' pickneglogsoftmax, forward, backward, one trainer
// update (DyNet autobatches the graph with --dynet-autobatch 1 or 2).
//
//   treelstm_train_dynet --dynet-autobatch K --dynet-mem M --corpus F
//                        [--updates N] [--reps R] [--embed E] [--hidden H] [--batch B]
//
// Corpus: bench_train_tree.c's ("treecorpus NTRAIN NDEV V", then "label n
// w l r ..." per tree, post-order). Batch u is trees u*B .. u*B + B - 1
// (wrapping), one warm-up update, then N timed; best of R runs, each from
// DyNet's own initialization (Glorot weights, as Sheaf's). After the last
// run the dev trees are classified (no update). Prints "# ..." lines and
// {"system": "dynet-abK", "trees_per_s": R, "dev_accuracy": A}. DyNet
// updates a lookup table's rows sparsely (only the rows looked up), as it
// does by default; --dense-lookup turns that off (every row's Adam update,
// as Sheaf's and PyTorch's). --cpu-time: the process's CPU clock instead
// of the wall clock.
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <dynet/dynet.h>
#include <dynet/expr.h>
#include <dynet/init.h>
#include <dynet/model.h>
#include <dynet/param-init.h>
#include <dynet/training.h>

using namespace dynet;

namespace {

struct Node {
  int w, l, r;
};
struct Tree {
  int label;
  std::vector<Node> nodes;
};

[[noreturn]] void die(const std::string &msg) {
  std::fprintf(stderr, "treelstm_train_dynet: %s\n", msg.c_str());
  std::exit(1);
}

void load(const std::string &path, unsigned *V, std::vector<Tree> *train, std::vector<Tree> *dev) {
  std::ifstream f(path);
  std::string head;
  long nt = 0, nd = 0, v = 0;
  if (!(f >> head >> nt >> nd >> v) || head != "treecorpus") die(path + ": expected 'treecorpus NTRAIN NDEV V'");
  *V = (unsigned)v;
  for (long k = 0; k < nt + nd; k++) {
    Tree t;
    int n = 0;
    if (!(f >> t.label >> n) || n <= 0) die(path + ": bad tree");
    t.nodes.resize((size_t)n);
    for (auto &x : t.nodes)
      if (!(f >> x.w >> x.l >> x.r)) die(path + ": bad node");
    (k < nt ? train : dev)->push_back(t);
  }
}

struct Net {
  ParameterCollection pc;
  Parameter W_leaf, b_leaf, W_node, b_node, W_out, b_out;
  LookupParameter emb;
  unsigned H;
  Net(unsigned V, unsigned E, unsigned H_) : H(H_) {
    emb = pc.add_lookup_parameters(V, {E});
    W_leaf = pc.add_parameters({3 * H, E});
    b_leaf = pc.add_parameters({3 * H}, ParameterInitConst(0.f));
    W_node = pc.add_parameters({5 * H, 2 * H});
    b_node = pc.add_parameters({5 * H}, ParameterInitConst(0.f));
    W_out = pc.add_parameters({5, H});
    b_out = pc.add_parameters({5}, ParameterInitConst(0.f));
  }
  // The tree's log-probabilities on cg (the parameters given once per graph).
  Expression tree(ComputationGraph &cg, const std::vector<Expression> &p, const Tree &t) {
    std::vector<Expression> h(t.nodes.size()), c(t.nodes.size());
    for (size_t i = 0; i < t.nodes.size(); i++) {
      const Node &n = t.nodes[i];
      if (n.l < 0) {
        Expression z = affine_transform({p[1], p[0], lookup(cg, emb, (unsigned)n.w)});
        Expression io = logistic(pick_range(z, 0, 2 * H));
        c[i] = cmult(pick_range(io, 0, H), tanh(pick_range(z, 2 * H, 3 * H)));
        h[i] = cmult(pick_range(io, H, 2 * H), tanh(c[i]));
      } else {
        Expression z = affine_transform({p[3], p[2], concatenate({h[n.l], h[n.r]})});
        Expression g = logistic(pick_range(z, 0, 4 * H));
        Expression u = tanh(pick_range(z, 4 * H, 5 * H));
        c[i] = cmult(pick_range(g, 0, H), u) + cmult(pick_range(g, H, 2 * H), c[n.l]) +
               cmult(pick_range(g, 2 * H, 3 * H), c[n.r]);
        h[i] = cmult(pick_range(g, 3 * H, 4 * H), tanh(c[i]));
      }
    }
    return affine_transform({p[5], p[4], h.back()});
  }
  std::vector<Expression> params(ComputationGraph &cg) {
    return {parameter(cg, W_leaf), parameter(cg, b_leaf), parameter(cg, W_node),
            parameter(cg, b_node), parameter(cg, W_out),  parameter(cg, b_out)};
  }
};

bool g_cpu = false;

double now_s() {
  if (g_cpu) {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char **argv) {
  dynet::initialize(argc, argv);  // consumes --dynet-* flags
  std::string corpus;
  int updates = 100, reps = 3, batch = 32, autobatch = 0;
  bool dense_lookup = false;
  unsigned E = 64, H = 128;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (i + 1 < argc && a == "--corpus") corpus = argv[++i];
    else if (i + 1 < argc && a == "--updates") updates = std::atoi(argv[++i]);
    else if (i + 1 < argc && a == "--reps") reps = std::atoi(argv[++i]);
    else if (i + 1 < argc && a == "--batch") batch = std::atoi(argv[++i]);
    else if (i + 1 < argc && a == "--embed") E = (unsigned)std::atoi(argv[++i]);
    else if (i + 1 < argc && a == "--hidden") H = (unsigned)std::atoi(argv[++i]);
    else if (i + 1 < argc && a == "--autobatch") autobatch = std::atoi(argv[++i]);  // for the label
    else if (a == "--cpu-time") g_cpu = true;
    else if (a == "--dense-lookup") dense_lookup = true;
    else die("unknown argument " + a);
  }
  if (corpus.empty() || updates < 1 || reps < 1 || batch < 1) die("--corpus F needed; counts >= 1");
  unsigned V;
  std::vector<Tree> train, dev;
  load(corpus, &V, &train, &dev);
  std::printf("# dynet 2.1.2, autobatch %d, 1 thread\n", autobatch);
  double best = 1e30, acc = -1;
  for (int rep = 0; rep < reps; rep++) {
    Net net(V, E, H);
    AdamTrainer tr(net.pc, 2e-3f);
    tr.clipping_enabled = false;
    tr.sparse_updates_enabled = !dense_lookup;
    auto step = [&](long u) {
      ComputationGraph cg;
      std::vector<Expression> p = net.params(cg), losses;
      for (int i = 0; i < batch; i++) {
        const Tree &t = train[(size_t)((u * batch + i) % (long)train.size())];
        losses.push_back(pickneglogsoftmax(net.tree(cg, p, t), (unsigned)t.label));
      }
      Expression loss = sum(losses) / (float)batch;
      cg.forward(loss);
      cg.backward(loss);
      tr.update();
    };
    step(0);
    double t0 = now_s();
    for (long u = 1; u <= updates; u++) step(u);
    double s = now_s() - t0;
    if (s < best) best = s;
    if (rep == reps - 1) {
      long right = 0;
      for (size_t i = 0; i < dev.size(); i += 256) {
        ComputationGraph cg;
        std::vector<Expression> p = net.params(cg), outs;
        size_t n = std::min((size_t)256, dev.size() - i);
        for (size_t k = 0; k < n; k++) outs.push_back(net.tree(cg, p, dev[i + k]));
        std::vector<float> v = as_vector(cg.forward(concatenate_cols(outs)));
        for (size_t k = 0; k < n; k++) {
          int b = 0;
          for (int j = 1; j < 5; j++)
            if (v[k * 5 + (size_t)j] > v[k * 5 + (size_t)b]) b = j;
          right += b == dev[i + k].label;
        }
      }
      acc = (double)right / (double)dev.size();
    }
  }
  std::printf("{\"system\": \"dynet-ab%d\", \"trees_per_s\": %.3f, \"dev_accuracy\": %.6f}\n", autobatch,
              (double)updates * batch / best, acc);
  return 0;
}
