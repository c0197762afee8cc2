// Tensor parallelism's operators against the unsplit computation, under mpirun with 2 and 3
// ranks (tests/CMakeLists.txt): the world is the tensor-parallel group. Sizes are awkward on
// purpose: with 3 ranks the vocabulary of 257 pads to 258 (one padded column, on the last rank)
// and each rank holds 2 of 6 heads. Every rank also runs the whole model alone, on the same
// weights and batch, and compares its slices with it.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "core/job.h"
#include "core/rng.h"
#include "kernels/kernels.h"
#include "model/gpt2.h"
#include "model/model.h"
#include "parallel/tensor_parallel.h"

namespace kiln {
namespace {

Communicator& world() {
  static std::unique_ptr<Communicator> c = make_world_communicator({30.0, "mpi"});
  return *c;
}

TensorParallel group(bool sp) {
  return {&world(), world().size(), world().rank(), sp};
}

std::vector<float> random_values(int64_t n, uint64_t seed, double scale = 1.0) {
  std::vector<float> x(n);
  init_normal(x.data(), n, scale, seed);
  return x;
}

// The largest |a - b| relative to the largest |a|.
double relative_difference(const float* a, const float* b, int64_t n) {
  double d = 0, m = 0;
  for (int64_t i = 0; i < n; i++) {
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
    m = std::max(m, std::fabs(static_cast<double>(a[i])));
  }
  return m > 0 ? d / m : d;
}

TEST(TensorParallelOps, VocabParallelCrossEntropyIsTheWholeVocabularysLossAndGradient) {
  ASSERT_TRUE(launched_by_mpi()) << "run this binary under mpirun";
  const int R = world().size();
  const int V = 257, Vp = pad_vocab(V, R);  // padding columns at the end, masked
  const int64_t M = 37;
  std::vector<float> logits = random_values(M * Vp, 7, 3.0);
  std::vector<int32_t> targets(M);
  for (int64_t m = 0; m < M; m++) targets[m] = m % 9 == 4 ? -1 : static_cast<int32_t>(m * 31 % V);
  targets[0] = V - 1;  // on the last rank
  std::vector<float> whole = logits, losses(M);
  const float scale = 0.125f;
  softmax_cross_entropy(whole.data(), losses.data(), targets.data(), M, V, Vp, scale);
  for (bool bf : {false, true}) {
    const TensorParallel tp = group(false);
    const VocabSlice v = vocab_slice(tp, Vp);
    std::vector<float> part(M * v.count), part_losses(M);
    std::vector<bf16> part_bf(M * v.count);
    for (int64_t m = 0; m < M; m++)
      for (int64_t i = 0; i < v.count; i++) part[m * v.count + i] = logits[m * Vp + v.begin + i];
    VocabLossWork work(tp, M);
    vocab_parallel_cross_entropy(tp, part.data(), part_losses.data(), targets.data(), M, V, v,
                                 scale, work, bf ? part_bf.data() : nullptr);
    for (int64_t m = 0; m < M; m++) {
      EXPECT_NEAR(part_losses[m], losses[m], 1e-5 * std::max(1.0f, losses[m])) << m;
      for (int64_t i = 0; i < v.count; i++) {
        const float want = whole[m * Vp + v.begin + i];
        const float got = bf ? bf16_to_float(part_bf[m * v.count + i]) : part[m * v.count + i];
        ASSERT_NEAR(got, want, bf ? 1e-2 * std::fabs(want) + 1e-7 : 1e-6) << m << " " << i;
      }
    }
  }
}

TEST(TensorParallelOps, VocabParallelEmbeddingSumsToTheWholeEmbedding) {
  const int R = world().size();
  const int B = 2, T = 5, C = 12, Vp = 9 * R;
  std::vector<float> wte = random_values(static_cast<int64_t>(Vp) * C, 1);
  std::vector<float> wpe = random_values(static_cast<int64_t>(T) * C, 2);
  std::vector<int32_t> tokens(B * T);
  for (int i = 0; i < B * T; i++) tokens[i] = (i * 7 + 3) % Vp;
  std::vector<float> want(B * T * C);
  encoder_forward(want.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  const TensorParallel tp = group(false);
  const VocabSlice v = vocab_slice(tp, Vp);
  std::vector<float> got(B * T * C);
  vocab_embedding_forward(got.data(), tokens.data(), wte.data() + v.begin * C, v, wpe.data(), B, T,
                          C, tp.rank);
  g_forward(tp, got.data(), got.data(), B * T, C);
  EXPECT_EQ(got, want);  // one non-zero term and the position: exact
  // Backward: each rank's rows of the whole gradient, and the whole position gradient.
  std::vector<float> dout = random_values(B * T * C, 3);
  std::vector<float> dwte(static_cast<int64_t>(Vp) * C, 0.0f), dwpe(T * C, 0.0f);
  encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  std::vector<float> part(v.count * C, 0.0f), part_pos(T * C, 0.0f);
  vocab_embedding_backward(part.data(), part_pos.data(), dout.data(), tokens.data(), v, B, T, C);
  for (int64_t i = 0; i < v.count * C; i++) ASSERT_EQ(part[i], dwte[v.begin * C + i]) << i;
  EXPECT_EQ(part_pos, dwpe);
}

// A model split over the group against the whole model on one rank: the loss, and each
// parameter's gradient (this rank's slice of it), after a forward and backward of one batch, for
// every mode that changes the split layers' code.
struct Mode {
  bool sp, bf16, flash;
  Recompute recompute;
};

void expect_split_matches_whole(const ModelConfig& c) {
  const int R = world().size();
  const int B = 3, T = 8;  // 24 tokens: split in 2 or 3 under sequence parallelism
  const ParamLayout whole_layout = param_layout(c);
  std::vector<float> whole(whole_layout.total);
  init_params(whole_layout, c, whole.data(), 11);
  // Non-zero biases and norm parameters off 1, so that a bias added twice shows.
  for (const auto& t : whole_layout.tensors)
    if (t.shape.size() == 1) {
      std::vector<float> r = random_values(t.numel, 100 + t.offset, 0.1);
      for (int64_t i = 0; i < t.numel; i++) whole[t.offset + i] += r[i];
    }
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int i = 0; i < B * T; i++) {
    in[i] = (i * 37 + 5) % c.vocab_size;
    tg[i] = i == 3 ? -1 : (i * 11 + 2) % c.vocab_size;
  }
  const float dloss = 1.0f / (B * T);
  for (const Mode m :
       {Mode{false, false, false, Recompute::none}, Mode{true, false, false, Recompute::none},
        Mode{true, false, true, Recompute::attention}, Mode{false, false, false, Recompute::full},
        Mode{true, true, false, Recompute::full}, Mode{true, true, true, Recompute::none}}) {
    SCOPED_TRACE(::testing::Message()
                 << c.family << " sp=" << m.sp << " bf16=" << m.bf16 << " flash=" << m.flash
                 << " recompute=" << static_cast<int>(m.recompute));
    ModelOptions o;
    o.bf16 = m.bf16;
    o.flash_attention = m.flash;
    o.recompute = m.recompute;
    auto ref = make_model(c, B, T, o);
    ref->set_weights(whole.data());
    std::vector<float> ref_grads(whole_layout.total);
    const double ref_loss = ref->forward(whole.data(), in.data(), tg.data(), dloss);
    ref->backward(whole.data(), ref_grads.data(), in.data(), {}, {}, false);

    o.tp = group(m.sp);
    auto split = make_model(c, B, T, o);
    const LocalLayout local = tp_local_layout(c, R, world().rank());
    std::vector<float> params(local.total), grads(local.total);
    take_local_slices(c, local, whole.data(), params.data());
    split->set_weights(params.data());
    // Twice, accumulating the second: a replicated gradient must not be summed over the group
    // again on top of what it holds.
    double loss = 0;
    for (int pass = 0; pass < 2; pass++) {
      loss = split->forward(params.data(), in.data(), tg.data(), dloss);
      split->backward(params.data(), grads.data(), in.data(), {}, {}, pass == 1);
    }
    const double tol = m.bf16 ? 1e-2 : 1e-5;
    EXPECT_NEAR(loss, ref_loss, tol * std::fabs(ref_loss));
    std::vector<float> want(local.total);
    take_local_slices(c, local, ref_grads.data(), want.data());
    for (float& g : want) g *= 2;
    for (const auto& t : local.tensors)
      EXPECT_LT(relative_difference(want.data() + t.offset, grads.data() + t.offset, t.numel()),
                m.bf16 ? 3e-2 : 1e-4)
          << t.name;
  }
}

TEST(TensorParallelOps, ASplitGpt2MatchesTheWholeModelInEveryMode) {
  // 6 heads of 8 (2 or 3 per rank), the vocabulary padded to a multiple of the ranks.
  expect_split_matches_whole(gpt2_config(2, 6, 48, 16, 257, world().size()));
}

// Llama: grouped-query attention with as many key/value heads as ranks (one each), SwiGLU, RMSNorm,
// rotary positions; the LM head untied and tied.
TEST(TensorParallelOps, ASplitLlamaMatchesTheWholeModelInEveryMode) {
  const int R = world().size();
  for (bool tied : {false, true}) {
    ModelConfig c = gpt2_config(2, 6, 48, 16, 257, R);
    c.family = "llama";
    c.n_kv_head = R;
    c.ffn_hidden = 96;
    c.tie_embeddings = tied;
    expect_split_matches_whole(c);
  }
}

TEST(TensorParallelOps, AModelThatDoesNotSplitIsRefusedNamingWhy) {
  if (world().size() != 2) GTEST_SKIP() << "sizes chosen for 2 ranks";
  ModelOptions o;
  o.tp = group(true);
  try {
    make_model(gpt2_config(1, 3, 24, 8, 10, 2), 2, 4, o);  // 3 heads over 2 ranks
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.tp = 2 does not divide model.n_head = 3"),
              std::string::npos)
        << e.what();
  }
  try {
    make_model(gpt2_config(1, 2, 24, 8, 10, 2), 1, 3, o);  // 3 tokens over 2 ranks
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.sp"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
