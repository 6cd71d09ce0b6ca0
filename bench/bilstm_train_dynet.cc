// bilstm_train_dynet.cc — the DyNet training peer of bench_train.c: the
// BiLSTM tagger trained on the same sentences, batches and tags, from the
// same initial weights (the safetensors file bench_train.c saves from
// Sheaf's seeded model), with the same optimizer (Adam lr 1e-3, betas 0.9
// and 0.999, eps 1e-8, no clipping, no weight decay), written the way
// DyNet's own examples write training: per batch one ComputationGraph,
// every sentence of the batch built into it, the mean token
// pickneglogsoftmax, forward, backward, one trainer update (DyNet
// autobatches the graph with --dynet-autobatch 1 or 2).
//
//   bilstm_train_dynet --dynet-autobatch K --dynet-mem M --weights W --corpus F
//                      [--updates N] [--reps R] [--batch B] [--cpu-time] [--dense-lookup]
//
// Cell: bench_train.c's (sheaf_lstm_cell: z = W [x_t; h_{t-1}] + b, gates
// i, f, g, o; no c_{t-1} at the first step; h_0 = 0), a forward and a
// backward direction with their own W, b; per word W_tag [h_t; h'_t] +
// b_tag. Corpus: bench_train.c's ("corpus N V", then "n w.. t.." per
// sentence). Batch u is sentences u*B .. u*B + B - 1 (wrapping), one
// warm-up update, then N timed; best of R runs, each from the same weights.
// DyNet updates a lookup table's rows sparsely (only the rows looked up:
// its default); --dense-lookup makes it update every row, as Sheaf's and
// PyTorch's dense Adam do. --cpu-time: the process's CPU clock instead of
// the wall clock. Prints "# ..." lines and {"system": "dynet-abK",
// "sents_per_s": R, "final_loss": L, "first_loss": L0} (L: the last timed
// update's loss, L0: the warm-up update's, before any step: equal to
// Sheaf's when the model and the initial weights are the same).
#include <ctime>

#include <dynet/training.h>

#include "dynet_peer.h"

using namespace dynet;

namespace {

struct Sent {
  std::vector<unsigned> w, t;
};
typedef peer::BiLstmTagger Net;

std::vector<Sent> load_corpus(const std::string &path) {
  std::ifstream f(path);
  std::string head;
  long n = 0, v = 0;
  if (!(f >> head >> n >> v) || head != "corpus" || n < 1) peer::die(path + ": expected 'corpus N V'");
  std::vector<Sent> sents((size_t)n);
  for (auto &s : sents) {
    int len = 0;
    if (!(f >> len) || len < 1) peer::die(path + ": bad sentence");
    s.w.resize((size_t)len);
    s.t.resize((size_t)len);
    for (auto &x : s.w)
      if (!(f >> x)) peer::die(path + ": bad word");
    for (auto &x : s.t)
      if (!(f >> x)) peer::die(path + ": bad tag");
  }
  return sents;
}

// The mean token NLL of sentences [first, first + n) (wrapping) on cg.
Expression batch_loss(ComputationGraph &cg, Net &m, const std::vector<Sent> &sents, size_t first, size_t n) {
  unsigned H = m.H;
  Expression W[2], b[2];
  for (int d = 0; d < 2; d++) W[d] = parameter(cg, m.W[d]), b[d] = parameter(cg, m.b[d]);
  Expression Wt = parameter(cg, m.W_tag), bt = parameter(cg, m.b_tag), zero = zeros(cg, {H});
  std::vector<Expression> losses, fwd;
  auto step = [&](int d, unsigned w, Expression &h, Expression &c, bool has_c) {
    peer::lstm_step(W[d], b[d], lookup(cg, m.emb, w), H, h, c, has_c);
  };

  for (size_t k = 0; k < n; k++) {
    const Sent &s = sents[(first + k) % sents.size()];
    size_t len = s.w.size();
    fwd.resize(len);
    Expression h = zero, c;
    for (size_t t = 0; t < len; t++) {
      step(0, s.w[t], h, c, t > 0);
      fwd[t] = h;
    }
    h = zero;
    for (size_t j = 0; j < len; j++) {
      size_t t = len - 1 - j;
      step(1, s.w[t], h, c, j > 0);
      losses.push_back(pickneglogsoftmax(affine_transform({bt, Wt, concatenate({fwd[t], h})}), s.t[t]));
    }
  }
  return sum(losses) / (float)losses.size();
}

bool g_cpu = false;

double now_s() {
  if (!g_cpu) return peer::now_s();
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

}  // namespace

int main(int argc, char **argv) {
  std::string mem = "(default)";
  for (int i = 1; i + 1 < argc; i++)
    if (!std::strcmp(argv[i], "--dynet-mem")) mem = argv[i + 1];
  dynet::initialize(argc, argv);  // consumes --dynet-* flags
  std::string weights, corpus;
  int updates = 20, reps = 3, batch = 64;
  bool dense_lookup = false;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (i + 1 < argc && a == "--weights") weights = argv[++i];
    else if (i + 1 < argc && a == "--corpus") corpus = argv[++i];
    else if (i + 1 < argc && a == "--updates") updates = std::atoi(argv[++i]);
    else if (i + 1 < argc && a == "--reps") reps = std::atoi(argv[++i]);
    else if (i + 1 < argc && a == "--batch") batch = std::atoi(argv[++i]);
    else if (a == "--cpu-time") g_cpu = true;
    else if (a == "--dense-lookup") dense_lookup = true;
    else peer::die("unknown argument " + a);
  }
  if (weights.empty() || corpus.empty() || updates < 1 || reps < 1 || batch < 1)
    peer::die("--weights W and --corpus F needed; counts >= 1");
  peer::Safetensors w(weights);
  std::vector<Sent> sents = load_corpus(corpus);
  std::printf("# dynet 2.1.2 (Eigen %d.%d.%d), --dynet-autobatch %d, --dynet-mem %s, 1 thread, %s lookup "
              "updates, %s time\n",
              EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION, dynet::autobatch_flag, mem.c_str(),
              dense_lookup ? "dense" : "sparse", g_cpu ? "process CPU" : "wall");
  double best = 1e30, last_loss = 0, first_loss = 0;
  for (int rep = 0; rep < reps; rep++) {
    Net net(w);
    AdamTrainer tr(net.pc, 1e-3f, 0.9f, 0.999f, 1e-8f);
    tr.clipping_enabled = false;
    tr.sparse_updates_enabled = !dense_lookup;
    auto update = [&](long u) {
      ComputationGraph cg;
      Expression loss = batch_loss(cg, net, sents, (size_t)(u * batch), (size_t)batch);
      last_loss = as_scalar(cg.forward(loss));
      cg.backward(loss);
      tr.update();
    };
    update(0);
    first_loss = last_loss;
    double t0 = now_s();
    for (long u = 1; u <= updates; u++) update(u);
    double s = now_s() - t0;
    if (s < best) best = s;
  }
  std::printf("{\"system\": \"dynet-ab%d\", \"sents_per_s\": %.3f, \"final_loss\": %.6f, \"first_loss\": %.6f}\n",
              dynet::autobatch_flag, (double)updates * batch / best, last_loss, first_loss);
  return 0;
}
