// ZeRO-3's policy for the full-size parameter buffer during a micro-batch, as the model's block
// hooks call it: the ends (the embedding, and ln_f after the last block) stay present for the
// whole micro-batch (wte is used at both ends); each block is gathered before its forward and
// again before its backward, the next one in that direction prefetched while it runs, and its
// pages are handed back right after. At the end every page goes back.
#pragma once
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/page_buffer.h"
#include "parallel/data_parallel.h"

namespace kiln {

class Zero3Prefetch {
 public:
  // blocks: each block's range [begin, end) of the flat buffer, in layer order, contiguous from
  // the end of the embedding to the start of the final norm; `master` is this rank's shard.
  Zero3Prefetch(DataParallel& dp, PageBuffer& params, const float* master,
                std::vector<std::pair<int64_t, int64_t>> blocks);

  void begin_forward();         // the ends and block 0, waited for
  void before_forward(int l);   // block l ready, block l + 1 on its way
  void begin_backward();        // the last block on its way
  void before_backward(int l);  // block l ready, block l - 1 on its way
  void after_block(int l);      // block l's pages back
  void fetch_all();             // every parameter present (validation samples, ...)
  void drop_all();              // every page back
  // The most parameter memory held at once so far (bytes resident at a block's end).
  int64_t peak_resident_bytes() const { return peak_resident_; }
  // Called with each range [begin, end) once its parameters are present (bf16 makes its copy of
  // them there), and as each range goes back.
  std::function<void(int64_t begin, int64_t end)> on_present, on_drop;

 private:
  void fetch(int l);
  void present(int64_t begin, int64_t end) {
    if (on_present) on_present(begin, end);
  }
  void dropped(int64_t begin, int64_t end) {
    if (on_drop) on_drop(begin, end);
  }
  DataParallel& dp_;
  PageBuffer& params_;
  const float* master_;
  std::vector<std::pair<int64_t, int64_t>> blocks_;
  int64_t peak_resident_ = 0;
};

}  // namespace kiln
