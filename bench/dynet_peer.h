// dynet_peer.h — what the DyNet peers of the model benchmarks share
// (bench/*_dynet.cc; C++11, header only):
// the flags, reading the safetensors file sheaf_model_save writes into
// DyNet parameters, the throughput windows, the JSON lines, and the BiLSTM
// tagger's parameters and LSTM step (its inference and training peers).
//
// The peer protocol is the PyTorch peers' (bench/torch_peer.py, read by
// bench/bench_util.c): "# ..." lines are echoed by the benchmark, one JSON
// object per line is a measurement ({"system": "dynet-abK", "batch",
// "threads", "hidden", KEY}), --check FILE writes the outputs of the first
// --check-count instances (batches of 64) as float32.
//
// Flags: DyNet's own first (--dynet-autobatch K, --dynet-mem M: read by
// dynet::initialize), then --weights F, the data flag, --batches 1,64,
// --min-time S, --rounds R, --check FILE, --check-count N.
//
// Weights: Sheaf's row-vector convention y = x.W with W [in, out] row-major
// is, byte for byte, DyNet's column-vector y = W'x with W' {out, in}
// column-major: the tensors are copied as they are.
#ifndef SHEAF_BENCH_DYNET_PEER_H
#define SHEAF_BENCH_DYNET_PEER_H

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <Eigen/Core>
#include <dynet/dynet.h>
#include <dynet/expr.h>
#include <dynet/init.h>
#include <dynet/model.h>
#include <dynet/tensor.h>

namespace peer {

struct Opts {
  std::string weights, data, check, batches = "1,10,64", mem = "(default)";
  double min_time = 1.0;
  int rounds = 3, check_count = 64;
};

[[noreturn]] inline void die(const std::string &msg) {
  std::fprintf(stderr, "dynet peer: %s\n", msg.c_str());
  std::exit(1);
}

// dynet::initialize (it takes the --dynet-* flags out of argv), then ours.
inline Opts parse(int argc, char **argv, const char *data_flag) {
  Opts o;
  for (int i = 1; i + 1 < argc; i++)
    if (!std::strcmp(argv[i], "--dynet-mem")) o.mem = argv[i + 1];
  dynet::initialize(argc, argv);
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (i + 1 >= argc) die("flag " + a + " needs a value");
    std::string v = argv[++i];
    if (a == "--weights") o.weights = v;
    else if (a == data_flag) o.data = v;
    else if (a == "--batches") o.batches = v;
    else if (a == "--min-time") o.min_time = std::atof(v.c_str());
    else if (a == "--rounds") o.rounds = std::atoi(v.c_str());
    else if (a == "--check") o.check = v;
    else if (a == "--check-count") o.check_count = std::atoi(v.c_str());
    else die("unknown flag " + a);
  }
  if (o.weights.empty() || o.data.empty()) die(std::string("--weights and ") + data_flag + " are required");
  return o;
}

inline std::vector<int> int_list(const std::string &s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string t;
  while (std::getline(ss, t, ',')) v.push_back(std::atoi(t.c_str()));
  return v;
}

// The "# dynet ..." banner: version, Eigen, autobatch, memory, threads.
inline void banner(const Opts &o) {
  std::printf("# dynet 2.1.2 (C++ library from the PyPI sdist, Eigen %d.%d.%d backend), "
              "--dynet-autobatch %d, --dynet-mem %s, 1 thread\n",
              EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION, dynet::autobatch_flag,
              o.mem.c_str());
  std::fflush(stdout);
}

// A safetensors file: its F32 tensors by name.
struct Safetensors {
  std::string bytes, header;
  size_t base = 0;
  explicit Safetensors(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) die("cannot read " + path);
    std::stringstream ss;
    ss << f.rdbuf();
    bytes = ss.str();
    if (bytes.size() < 8) die(path + ": not a safetensors file");
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    if (8 + n > bytes.size()) die(path + ": bad header");
    header = bytes.substr(8, n);
    base = 8 + n;
  }
  // Tensor `name` (dtype F32) as floats; its element count must be `want`.
  std::vector<float> get(const std::string &name, size_t want) const {
    size_t at = header.find("\"" + name + "\"");
    if (at == std::string::npos) die("tensor " + name + " missing");
    size_t d = header.find("\"data_offsets\"", at);
    size_t lb = header.find('[', d);
    if (d == std::string::npos || lb == std::string::npos) die("tensor " + name + ": no offsets");
    char *end = nullptr;
    unsigned long long a = std::strtoull(header.c_str() + lb + 1, &end, 10);
    unsigned long long b = std::strtoull(end + 1, nullptr, 10);
    if (b < a || (b - a) != want * 4 || base + b > bytes.size())
      die("tensor " + name + ": size " + std::to_string(b - a) + " bytes, expected " +
          std::to_string(want * 4));
    std::vector<float> v(want);
    std::memcpy(v.data(), bytes.data() + base + a, want * 4);
    return v;
  }
  // Parameter {out, in} (or {out}) from the tensor [in, out] (or [out]).
  dynet::Parameter param(dynet::ParameterCollection &m, const std::string &name,
                         const dynet::Dim &d) const {
    dynet::Parameter p = m.add_parameters(d);
    p.set_value(get(name, d.size()));
    return p;
  }
  // Lookup table of `rows` rows of `dim` from the tensor [rows, dim].
  dynet::LookupParameter table(dynet::ParameterCollection &m, const std::string &name,
                               unsigned rows, unsigned dim) const {
    dynet::LookupParameter p = m.add_lookup_parameters(rows, {dim});
    std::vector<float> all = get(name, (size_t)rows * dim);
    for (unsigned r = 0; r < rows; r++)
      p.initialize(r, std::vector<float>(all.begin() + (size_t)r * dim,
                                         all.begin() + (size_t)(r + 1) * dim));
    return p;
  }
  // The first dimension of tensor `name` (its "shape": [d0, ...]).
  unsigned dim0(const std::string &name) const {
    size_t at = header.find("\"" + name + "\"");
    size_t s = at == std::string::npos ? at : header.find("\"shape\"", at);
    if (s == std::string::npos) die("tensor " + name + ": no shape");
    return (unsigned)std::strtoul(header.c_str() + header.find('[', s) + 1, nullptr, 10);
  }
};

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The calling thread's CPU clock in seconds.
inline double cpu_now_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// SHEAF_PEER_CPU_TIME=1 in the environment (bench_dynamic --cpu-time):
// rates on the thread's CPU clock, as Sheaf's rows of that run are.
inline bool cpu_time_env() {
  const char *e = std::getenv("SHEAF_PEER_CPU_TIME");
  return e && std::atoi(e) != 0;
}

// Best instances/s over `rounds` windows of at least min_time seconds, each
// made of whole passes (pass() runs every batch once over n instances),
// after one warm-up pass (the memory pools grow to their size); on the
// wall clock, or with cpu on the thread's CPU clock.
template <class F> double rate(F pass, int n, double min_time, int rounds, bool cpu = false) {
  pass();
  double best = 0;
  for (int r = 0; r < rounds; r++) {
    long passes = 0;
    double t0 = cpu ? cpu_now_s() : now_s(), dt;
    do {
      pass();
      passes++;
      dt = (cpu ? cpu_now_s() : now_s()) - t0;
    } while (dt < min_time);
    if (passes * n / dt > best) best = passes * n / dt;
  }
  return best;
}

inline void emit(int batch, unsigned hidden, const char *key, double r) {
  std::printf("{\"system\": \"dynet-ab%d\", \"batch\": %d, \"threads\": 1, \"hidden\": %u, "
              "\"%s\": %.2f}\n",
              dynet::autobatch_flag, batch, hidden, key, r);
  std::fflush(stdout);
}

inline void write_check(const std::string &path, const std::vector<float> &v) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(v.data(), 4, v.size(), f) != v.size() || std::fclose(f))
    die("cannot write " + path);
}

// The BiLSTM tagger of src/models/bilstm.c (bilstm_dynet.cc, bilstm_train_dynet.cc):
// its parameters, by Sheaf's names, from the weights file.
struct BiLstmTagger {
  dynet::ParameterCollection pc;
  dynet::Parameter W[2], b[2], W_tag, b_tag;
  dynet::LookupParameter emb;
  unsigned H, E, T;
  explicit BiLstmTagger(const Safetensors &w) {
    unsigned V = w.dim0("emb");
    T = w.dim0("b_tag");
    H = w.dim0("W_tag") / 2;
    E = w.dim0("W_fwd") - H;  // E + H rows
    emb = w.table(pc, "emb", V, E);
    W[0] = w.param(pc, "W_fwd", {4 * H, E + H});
    b[0] = w.param(pc, "b_fwd", {4 * H});
    W[1] = w.param(pc, "W_bwd", {4 * H, E + H});
    b[1] = w.param(pc, "b_bwd", {4 * H});
    W_tag = w.param(pc, "W_tag", {T, 2 * H});
    b_tag = w.param(pc, "b_tag", {T});
  }
};

// One step of Sheaf's sheaf_lstm_cell (gates i, f, g, o) from (h, c) on
// input x: z = W [x; h] + b; has_c false at the first step (no c_{t-1}).
inline void lstm_step(const dynet::Expression &W, const dynet::Expression &b, const dynet::Expression &x,
                      unsigned H, dynet::Expression &h, dynet::Expression &c, bool has_c) {
  using namespace dynet;
  Expression z = affine_transform({b, W, concatenate({x, h})});
  Expression ifg = logistic(pick_range(z, 0, 2 * H));
  Expression g = tanh(pick_range(z, 2 * H, 3 * H));
  Expression o = logistic(pick_range(z, 3 * H, 4 * H));
  Expression ig = cmult(pick_range(ifg, 0, H), g);
  c = has_c ? cmult(pick_range(ifg, H, 2 * H), c) + ig : ig;
  h = cmult(o, tanh(c));
}

}  // namespace peer

#endif
