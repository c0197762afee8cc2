#include "plan/model_spec.h"

#include <tuple>

#include "core/closest_name.h"
#include "core/error.h"

namespace kiln::plan {

JobSpec Preset::job() const {
  JobSpec j;
  j.seq_len = seq_len;
  j.global_batch_tokens = global_batch_tokens;
  j.train_tokens = train_tokens;
  return j;
}

namespace {

ModelSpec gpt(const char* name, int L, int h, int a, int64_t V, int ctx, bool dropout) {
  ModelSpec m;
  m.name = name;
  m.n_layer = L;
  m.hidden = h;
  m.n_head = a;
  m.n_kv_head = a;
  m.ffn_hidden = 4 * h;
  m.vocab = V;
  m.max_seq = ctx;
  m.dropout = dropout;
  return m;
}

ModelSpec llama(const char* name, int L, int h, int a, int g, int f, int64_t V, int ctx) {
  ModelSpec m;
  m.family = "llama";
  m.name = name;
  m.n_layer = L;
  m.hidden = h;
  m.n_head = a;
  m.n_kv_head = g;
  m.ffn_hidden = f;
  m.vocab = V;
  m.max_seq = ctx;
  m.ffn = FfnKind::swiglu;
  m.norm = NormKind::rmsnorm;
  m.learned_positions = false;
  m.bias = false;
  m.tied_embeddings = false;
  return m;
}

// Chinchilla's compute-optimal budget (Hoffmann et al. 2022): about 20 tokens per parameter,
// used where a model's own training tokens were never published.
double chinchilla_tokens(const ModelSpec& m) {
  return 20.0 * double(count_params(m).total);
}

std::vector<Preset> make_presets() {
  std::vector<Preset> p;
  // GPT-2: Radford et al. 2019, "Language Models are Unsupervised Multitask Learners", table 2
  // (layers, width), context 1024 and batch 512; heads from the released configs. No dropout, as
  // kiln trains it. Training tokens were not published.
  const char* gpt2_src =
      "Radford et al. 2019 (GPT-2), table 2 and the released configs; tokens: 20 per parameter "
      "(Hoffmann et al. 2022), GPT-2's were not published";
  for (auto [name, L, h, a] :
       {std::tuple{"gpt2-124m", 12, 768, 12}, std::tuple{"gpt2-355m", 24, 1024, 16},
        std::tuple{"gpt2-774m", 36, 1280, 20}, std::tuple{"gpt2-1.5b", 48, 1600, 25}}) {
    ModelSpec m = gpt(name, L, h, a, 50257, 1024, false);
    p.push_back({m, 1024, 512 * 1024, chinchilla_tokens(m), gpt2_src});
  }
  // GPT-3 175B: Brown et al. 2020, table 2.1: 96 layers, d_model 12288, 96 heads of 128, batch
  // 3.2M tokens, context 2048, 300B training tokens. Dense attention everywhere (GPT-3 alternates
  // dense and banded sparse layers; the planner treats all as dense, as Megatron-LM runs it).
  p.push_back({gpt("gpt3-175b", 96, 12288, 96, 50257, 2048, true), 2048, 1536 * 2048, 300e9,
               "Brown et al. 2020 (GPT-3), table 2.1"});
  // Megatron-LM's weak-scaling GPT models: Narayanan et al. SC'21, table 1 (vocabulary 51,200,
  // sequence 2048, batch in sequences as listed). Training tokens: the paper's own estimate of
  // 450B for the 1T model and 300B (GPT-3's budget) for the others.
  const char* mlm_src = "Narayanan et al. 2021 (Megatron-LM, SC'21), table 1";
  struct Mlm {
    const char* name;
    int L, h, a, batch;
  };
  for (const Mlm& r :
       {Mlm{"megatron-1.7b", 24, 2304, 24, 512}, Mlm{"megatron-3.6b", 30, 3072, 32, 512},
        Mlm{"megatron-7.5b", 36, 4096, 32, 512}, Mlm{"megatron-18b", 40, 6144, 48, 1024},
        Mlm{"megatron-39b", 48, 8192, 64, 1536}, Mlm{"megatron-76b", 60, 10240, 80, 1792},
        Mlm{"megatron-145b", 80, 12288, 96, 2304}, Mlm{"megatron-310b", 96, 16384, 128, 2160},
        Mlm{"megatron-530b", 105, 20480, 128, 2520}, Mlm{"megatron-1t", 128, 25600, 160, 3072}}) {
    const double tokens = std::string(r.name) == "megatron-1t" ? 450e9 : 300e9;
    p.push_back({gpt(r.name, r.L, r.h, r.a, 51200, 2048, true), 2048, int64_t{r.batch} * 2048,
                 tokens, mlm_src});
  }
  // Llama 2: Touvron et al. 2023, table 1 (context 4096, 2.0T tokens, grouped-query attention for
  // 70B) and section 2.2 (batch 4M tokens); shapes from the released configs (vocabulary 32,000).
  const char* l2_src = "Touvron et al. 2023 (Llama 2), table 1 and section 2.2; released configs";
  p.push_back(
      {llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096), 4096, 4 << 20, 2e12, l2_src});
  p.push_back(
      {llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096), 4096, 4 << 20, 2e12, l2_src});
  p.push_back(
      {llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096), 4096, 4 << 20, 2e12, l2_src});
  // Llama 3: Dubey et al. 2024 ("The Llama 3 Herd of Models"), table 3 (layers, width, FFN width,
  // heads, 8 key/value heads, vocabulary 128K = 128,256 in the released configs), pre-training
  // context 8192 and 15.6T tokens for 405B (section 3.4: final batch 16M tokens). The 8B and 70B
  // batches were not published; kiln uses Llama 2's 4M tokens for them.
  const char* l3_src = "Dubey et al. 2024 (Llama 3), table 3 and section 3.4; released configs";
  p.push_back(
      {llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192), 8192, 4 << 20, 15e12, l3_src});
  p.push_back(
      {llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192), 8192, 4 << 20, 15e12, l3_src});
  p.push_back({llama("llama3-405b", 126, 16384, 128, 8, 53248, 128256, 8192), 8192, 16 << 20,
               15.6e12, l3_src});
  // Gemma 7B: Gemma Team 2024 ("Gemma: Open Models Based on Gemini Research and Technology",
  // arXiv:2403.08295), table 1: d_model 3072, 28 layers, 16 heads (and 16 key/value heads) of
  // 256, so the heads are wider than d_model (16 × 256 = 4096); GeGLU feed-forward of 49,152 (a
  // gate and an up projection of 24,576 each: three matrices, as SwiGLU), vocabulary 256,128
  // tied to the output, context 8192; 6T training tokens (section 3). Its batch was not
  // published; kiln uses Llama 2's 4M tokens.
  {
    ModelSpec g = llama("gemma-7b", 28, 3072, 16, 16, 24576, 256128, 8192);
    g.head_size = 256;
    g.tied_embeddings = true;
    p.push_back({g, 8192, 4 << 20, 6e12,
                 "Gemma Team 2024 (Gemma), tables 1 and 2, section 3; batch assumed (Llama 2's)"});
  }
  return p;
}

}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = make_presets();
  return all;
}

const Preset& find_preset(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& p : presets()) {
    if (p.model.name == name) return p;
    names.push_back(p.model.name);
  }
  std::string close = closest_name(name, names);
  if (!close.empty()) fail("unknown model '{}' (did you mean '{}'?)", name, close);
  fail("unknown model '{}'; the presets are: {} (or give --config with a kiln config)", name,
       join_names(names));
}

}  // namespace kiln::plan
