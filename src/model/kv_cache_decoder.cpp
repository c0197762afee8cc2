#include "model/kv_cache_decoder.h"

#include <cstring>

#include "core/error.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"

namespace kiln {

KvCacheDecoder::KvCacheDecoder(const Gpt2Config& c, const float* params)
    : cfg_(c), layout_(gpt2_param_layout(c)) {
  P_ = view_params(layout_, c, const_cast<float*>(params));
  const int64_t C = c.n_embd;
  for (int l = 0; l < c.n_layer; l++) {
    k_cache_.emplace_back(c.block_size * C);
    v_cache_.emplace_back(c.block_size * C);
  }
  x_.resize(C);
  ln_.resize(C);
  qkv_.resize(3 * C);
  atty_.resize(C);
  fch_.resize(4 * C);
  fch_gelu_.resize(4 * C);
  logits_.resize(c.padded_vocab_size);
  scores_.resize(c.block_size);
}

const float* KvCacheDecoder::step(int32_t token) {
  const int C = cfg_.n_embd;
  if (pos_ >= cfg_.block_size)
    fail("the sequence reached model.block_size ({}); no more positions", cfg_.block_size);
  if (token < 0 || token >= cfg_.vocab_size)
    fail("token id {} is outside the vocabulary (0..{})", token, cfg_.vocab_size - 1);
  const float* e = P_.wte + static_cast<int64_t>(token) * C;
  const float* p = P_.wpe + static_cast<int64_t>(pos_) * C;
  for (int c = 0; c < C; c++) x_[c] = e[c] + p[c];
  for (int l = 0; l < cfg_.n_layer; l++) {
    const BlockParams& W = P_.h[l];
    layernorm_forward(ln_.data(), &mean_, &rstd_, x_.data(), W.ln1_w, W.ln1_b, 1, C);
    matmul({1, 3 * C, C, false, false, false, true}, ln_.data(), W.qkv_w, qkv_.data(), W.qkv_b);
    std::memcpy(k_cache_[l].data() + static_cast<int64_t>(pos_) * C, qkv_.data() + C, C * 4);
    std::memcpy(v_cache_[l].data() + static_cast<int64_t>(pos_) * C, qkv_.data() + 2 * C, C * 4);
    attention_decode(atty_.data(), scores_.data(), qkv_.data(), k_cache_[l].data(),
                     v_cache_[l].data(), pos_ + 1, C, cfg_.n_head);
    matmul({1, C, C, false, false, true, true}, atty_.data(), W.attproj_w, x_.data(), W.attproj_b);
    layernorm_forward(ln_.data(), &mean_, &rstd_, x_.data(), W.ln2_w, W.ln2_b, 1, C);
    matmul({1, 4 * C, C, false, false, false, true}, ln_.data(), W.fc_w, fch_.data(), W.fc_b);
    gelu_forward(fch_gelu_.data(), fch_.data(), 4 * C);
    matmul({1, C, 4 * C, false, false, true, true}, fch_gelu_.data(), W.fcproj_w, x_.data(),
           W.fcproj_b);
  }
  layernorm_forward(ln_.data(), &mean_, &rstd_, x_.data(), P_.lnf_w, P_.lnf_b, 1, C);
  matmul({1, cfg_.padded_vocab_size, C, false, true, false, false}, ln_.data(), P_.wte,
         logits_.data());
  pos_++;
  return logits_.data();
}

}  // namespace kiln
