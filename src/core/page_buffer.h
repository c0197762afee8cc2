// A zeroed float array in its own anonymous memory mapping, whose pages can be handed back to the
// kernel while the array stays addressable: released pages read as zero and cost no memory until
// written again. ZeRO stage 2 keeps its full-size gradient buffer this way, holding only the
// buckets whose reduction has not finished.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace kiln {

class PageBuffer {
 public:
  PageBuffer() = default;
  explicit PageBuffer(size_t n);
  // Memory someone else mapped (a communicator's shared memory, Communicator::alloc_shared),
  // kept alive by `owner`. `removable`: data starts a page-aligned shared mapping of whole
  // pages, which release() hands back with MADV_REMOVE; otherwise release() only zeroes.
  PageBuffer(float* data, size_t n, std::shared_ptr<void> owner, bool removable);
  ~PageBuffer();
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  PageBuffer(PageBuffer&& o) noexcept { *this = std::move(o); }
  PageBuffer& operator=(PageBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(mapped_, o.mapped_);
    std::swap(owner_, o.owner_);
    std::swap(removable_, o.removable_);
    return *this;
  }

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(float); }

  // Zeroes [begin, end) and returns the whole pages inside it to the kernel (they fault back in,
  // zeroed, when written).
  void release(size_t begin, size_t end);
  // Zeroes everything, keeping the pages: cheaper than faulting them back in when all are needed.
  void zero();
  // Bytes of the mapping that are in memory now (mincore).
  size_t resident_bytes() const;

 private:
  float* data_ = nullptr;
  size_t size_ = 0, mapped_ = 0;
  std::shared_ptr<void> owner_;  // set: the memory is not ours to unmap
  bool removable_ = false;       // adopted memory whose pages MADV_REMOVE hands back
};

}  // namespace kiln
