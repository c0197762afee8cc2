// Data parallelism over a communicator: gradient buckets reduced while backward runs, and ZeRO
// stage 1 (optimizer state sharded across the data-parallel ranks).
//
// The flat gradient buffer is cut into buckets of about `bucket_bytes`, from its end backwards,
// at tensor boundaries: backward finishes gradients in that order (ln_f, the last block, ...,
// the first block, then wte and wpe, whose gradient also collects the LM head's). When the
// model reports a range final, every bucket inside the final region starts its reduction on the
// communication thread while backward goes on.
//
//   zero = 0: each bucket is all-reduced; every rank ends with the summed gradient.
//   zero = 1: each bucket is reduce-scattered by shard: rank r ends with the sum of its
//             contiguous shard [r*S, (r+1)*S) of the flat buffer, S = ceil(N/R), updates only
//             that shard of the parameters with its shard of the AdamW state, and the shards
//             are all-gathered into every rank's parameters.
//   zero = 2: as 1, and the gradients are sharded too: every micro-batch reduce-scatters its
//             buckets (accumulating into the shard), and a bucket's pages of the full-size
//             gradient buffer go back to the kernel as soon as its reduction is done, so only
//             the buckets still in flight (and wte's, written at both ends of backward) are held.
//   zero = 3: as 2, and the parameters are sharded too: each rank keeps the master copy of its
//             shard only; a range of the full-size parameter buffer is all-gathered just before
//             it is used (a block before its forward and again before its backward, the next
//             one prefetched) and its pages are returned right after.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/buffer.h"
#include "core/page_buffer.h"

namespace kiln {

class DataParallel {
 public:
  // tensor_offsets: offsets of the tensors in the flat buffer (ascending), for bucket edges.
  // `base`: the reduced part is [base, base + numel) of the flat buffers (a pipeline stage's
  // parameters); every offset and range in the calls below is one of the whole buffer.
  DataParallel(Communicator& comm, int64_t numel, const std::vector<int64_t>& tensor_offsets,
               int zero, int64_t bucket_bytes, int64_t base = 0);

  int zero() const { return zero_; }
  int64_t shard_begin() const { return base_ + shard_begin_; }
  int64_t shard_end() const { return base_ + shard_end_; }
  int64_t shard_size(int rank) const;
  int num_buckets() const { return static_cast<int>(buckets_.size()); }

  // zero 2 reduces after every micro-batch, the others after the last one only.
  bool reduces_every_micro_batch() const { return zero_ >= 2; }
  // Starts the reduction of one backward into the flat gradient buffer `grads` (zero 2: in
  // `pages`, whose reduced buckets it releases). `first`: the step's first reduction (zero 2
  // accumulates the later ones into the shard).
  void begin(PageBuffer& grads, bool first = true);
  // Gradients [begin, end) are final for this step: reduce the buckets that became complete.
  void ready(int64_t begin, int64_t end);
  // Waits for every reduction of the step; returns the seconds spent waiting. Afterwards the
  // summed gradient is in the flat buffer (zero 0) or in shard_grads() (zero 1).
  double finish();
  float* shard_grads() { return shard_grads_.data(); }  // zero 1: (shard_end - shard_begin)
  // zero 1, 2: every rank's updated shard of the parameters to every rank.
  void gather(float* params);
  // zero >= 1: the full buffer from the shards (checkpoints); `shard` is this rank's part.
  void gather_into(float* full, const float* shard);
  int64_t shard_grad_bytes() const { return shard_grads_.bytes(); }  // zero >= 1
  int64_t side_buffer_bytes() const { return shard_tmp_.bytes(); }   // zero >= 2, accumulation
  // zero 2: the most gradient-buffer memory held at the end of a backward so far (mincore).
  int64_t peak_resident_grad_bytes() const { return peak_resident_; }

  // zero 3: starts gathering [begin, end) of the parameters into `params` from every rank's
  // shard (this rank's part is copied from `master`, its shard of the parameters).
  void fetch(PageBuffer& params, const float* master, int64_t begin, int64_t end);
  // Waits for the fetch that started at `begin` (a no-op if none is pending).
  void await(int64_t begin);
  // Returns the pages of [begin, end) of the parameters.
  void drop(PageBuffer& params, int64_t begin, int64_t end) { params.release(begin, end); }

 private:
  struct Bucket {
    int64_t begin, end;
  };
  void launch(size_t bucket);
  void all_gather_shards(float* full);
  void release_finished();
  std::vector<int64_t> counts_in(int64_t begin, int64_t end) const;  // per rank: its shard ∩ range

  Communicator& comm_;
  int64_t base_;  // where the reduced part starts; the members below are relative to it
  int64_t numel_;
  int zero_;
  std::vector<Bucket> buckets_;  // in reduction order (from the end of the buffer)
  int64_t shard_begin_ = 0, shard_end_ = 0, shard_ = 0;
  Buffer<float> shard_grads_, shard_tmp_;
  PageBuffer* pages_ = nullptr;  // the gradient buffer of the reduction under way
  float* into_ = nullptr;        // where this reduction's shard goes
  bool first_ = true;
  int64_t peak_resident_ = 0;
  int64_t ready_from_ = 0;  // [ready_from_, numel_) is final
  size_t next_bucket_ = 0;
  std::vector<std::pair<size_t, std::shared_ptr<Work>>> pending_;   // (bucket, work)
  std::vector<std::pair<int64_t, std::shared_ptr<Work>>> fetches_;  // (begin, work)
};

}  // namespace kiln
