// A steady-state forward and backward allocates nothing through operator new but what oneDNN's
// execute does: the matmul primitives with their memory objects and the parameter views are
// made on first use only. Counted through a replacement of the global operator new for this test
// binary (it forwards to malloc and counts only while a test asks it to).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "model/gpt2.h"
#include "train/config.h"
#include "train/trainer.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_news{0};
}  // namespace

void* operator new(size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}

namespace kiln {
namespace {

// oneDNN 2.6's primitive::execute allocates on every call (its argument map), a few times per
// call depending on the number of arguments. The test measures that per kind of product and
// expects a step to allocate exactly that much for its products and nothing else: no views,
// no memory objects, no buffers.
TEST(Gpt2Steady, ForwardAndBackwardAllocateNothingBesidesOneDnnExecute) {
  int64_t per_call[2][2];  // [accumulate][bias]
  {
    std::vector<float> a(64 * 32), b(32 * 96), cc(64 * 96), bias(96);
    for (int acc = 0; acc < 2; acc++) {
      for (int bi = 0; bi < 2; bi++) {
        MatmulShape s{64, 96, 32, false, false, acc == 1, bi == 1};
        matmul(s, a.data(), b.data(), cc.data(), bi ? bias.data() : nullptr);
        g_news = 0;
        g_counting = true;
        matmul(s, a.data(), b.data(), cc.data(), bi ? bias.data() : nullptr);
        g_counting = false;
        per_call[acc][bi] = g_news.load();
      }
    }
  }
  ModelConfig c{2, 2, 32, 64, 100, pad_vocab(100, 128)};
  const int B = 2, T = 64;
  // Attention is batched products over the heads (oneDNN's allocations per call depend on the
  // shape and strides) and loops that allocate nothing: counted on the model's own shapes.
  int64_t att_fwd = 0, att_bwd = 0;
  {
    const int C = c.n_embd, NH = c.n_head;
    std::vector<float> qkv(B * T * 3 * C, 0.1f), dqkv(qkv.size()), out(B * T * C),
        dout(B * T * C, 0.1f), att(B * NH * T * T), datt(att.size());
    for (int rep = 0; rep < 2; rep++) {  // the first is the primitives' creation
      g_news = 0;
      g_counting = true;
      attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
      g_counting = false;
      att_fwd = g_news.exchange(0);
      g_counting = true;
      attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C,
                         NH);
      g_counting = false;
      att_bwd = g_news.load();
    }
  }
  const ParamLayout layout = gpt2_param_layout(c);
  Buffer<float> params(layout.total), grads(layout.total);
  gpt2_init(layout, c, params.data(), 3);
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int i = 0; i < B * T; i++) {
    in[i] = i % 100;
    tg[i] = (i * 7) % 100;
  }
  // The products of one block's forward (qkv, fc and the attention projection with bias; the
  // MLP projection with bias, accumulated into the residual) and backward (dW accumulated, dx
  // written, per linear), and attention's.
  const int64_t block_fwd = 3 * per_call[0][1] + per_call[1][1] + att_fwd;
  const int64_t block_bwd = 4 * per_call[1][0] + 4 * per_call[0][0] + att_bwd;
  const int64_t head = per_call[0][0] + per_call[1][0] + per_call[0][0];  // B*T = one chunk
  for (bool bf16 : {false, true}) {
    for (Recompute r : {Recompute::none, Recompute::full}) {
      ModelOptions o;
      o.bf16 = bf16;
      o.recompute = r;
      Gpt2 model(c, B, T, o);
      auto step = [&]() {
        model.set_weights(params.data());
        model.forward(params.data(), in.data(), tg.data(), 1.0f / (B * T));
        model.backward(params.data(), grads.data(), in.data());
      };
      step();  // first use: primitives, views
      g_news = 0;
      g_counting = true;
      step();
      g_counting = false;
      const int64_t blocks =
          c.n_layer * (block_fwd + block_bwd + (r == Recompute::full ? block_fwd : 0));
      EXPECT_EQ(g_news.load(), blocks + head)
          << (bf16 ? "bf16" : "fp32") << ", recompute " << recompute_name(r);
    }
  }
}

// A whole training step (batches, forward, backward, gradient norm, AdamW, the bf16 copy, the
// per-rank timing all-gather) allocates what the model's forward and backward do and nothing
// more: the trainer's own buffers are made at the first step. (The watchdog is off: its thread
// writes a heartbeat file once a second, which would count here at random. One rank: the
// multi-rank backends' asynchronous operations each allocate their completion handle.)
TEST(TrainerSteady, AStepAllocatesNothingBeyondTheModelsProducts) {
  for (const char* dtype : {"fp32", "bf16"}) {
    SCOPED_TRACE(dtype);
    const std::string toml = std::string(R"(
[model]
n_layer = 2
n_head = 2
n_embd = 32
block_size = 64
vocab_size = 100
[train]
batch_size = 2
seq_len = 64
steps = 10
val_every = 0
sample_tokens = 0
watchdog_seconds = 0
out_dir = "/nonexistent/kiln-alloc-test"
dtype = ")") + dtype + R"("
[checkpoint]
every = 0
[hardware]
peak_gflops = 100.0
)";
    TrainConfig cfg = parse_train_config(toml, "alloc.toml", {});
    TrainerOptions opts;
    opts.quiet = true;
    opts.batches = [](int32_t* in, int32_t* tg) {
      for (int i = 0; i < 2 * 64; i++) {
        in[i] = i % 100;
        tg[i] = (i * 7) % 100;
      }
    };
    Trainer trainer(cfg, opts);
    trainer.step();
    trainer.step();
    g_news = 0;
    g_counting = true;
    trainer.step();
    g_counting = false;
    const int64_t step_news = g_news.load();
    // The model alone, on the trainer's own buffers and batch: forward, then backward writing
    // the gradients (as the first micro-batch does).
    Model& model = trainer.model();
    std::vector<float> grads(model.layout().total);
    std::vector<int32_t> in(2 * 64), tg(2 * 64);
    opts.batches(in.data(), tg.data());
    std::vector<float> params(model.layout().total, 0.01f);
    model.set_weights(params.data());
    model.forward(params.data(), in.data(), tg.data(), 1.0f / 128);
    model.backward(params.data(), grads.data(), in.data(), {}, {}, false);
    g_news = 0;
    g_counting = true;
    model.forward(params.data(), in.data(), tg.data(), 1.0f / 128);
    model.backward(params.data(), grads.data(), in.data(), {}, {}, false);
    g_counting = false;
    EXPECT_EQ(step_news, g_news.load());
  }
}

}  // namespace
}  // namespace kiln
