#include "core/page_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <new>
#include <stdexcept>
#include <vector>

namespace kiln {

namespace {
size_t page_size() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}
}  // namespace

PageBuffer::PageBuffer(size_t n) : size_(n) {
  if (n == 0) return;
  mapped_ = (n * sizeof(float) + page_size() - 1) / page_size() * page_size();
  void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  data_ = static_cast<float*>(p);
}

PageBuffer::PageBuffer(float* data, size_t n, std::shared_ptr<void> owner, bool removable)
    : data_(data), size_(n), owner_(std::move(owner)), removable_(removable) {
  if (!owner_) throw std::invalid_argument("PageBuffer: adopted memory needs its owner");
  mapped_ = (n * sizeof(float) + page_size() - 1) / page_size() * page_size();
}

PageBuffer::~PageBuffer() {
  if (data_ && !owner_) munmap(data_, mapped_);
}

void PageBuffer::release(size_t begin, size_t end) {
  if (begin >= end) return;
  const size_t ps = page_size();
  auto* base = reinterpret_cast<char*>(data_);
  size_t b = begin * sizeof(float), e = end * sizeof(float);
  size_t pb = (b + ps - 1) / ps * ps, pe = e / ps * ps;
  if (end == size_) pe = mapped_;  // the last page is ours alone
  if (pb >= pe || (owner_ && !removable_)) {
    std::memset(base + b, 0, e - b);
    return;
  }
  std::memset(base + b, 0, pb - b);  // partial pages at the edges are zeroed by hand
  if (e > pe) std::memset(base + pe, 0, e - pe);
  // Private anonymous memory reads back as zero after MADV_DONTNEED; a shared mapping keeps its
  // pages in the file unless they are removed from it.
  if (madvise(base + pb, pe - pb, removable_ ? MADV_REMOVE : MADV_DONTNEED) != 0)
    std::memset(base + pb, 0, pe - pb);
}

void PageBuffer::zero() {
  if (data_) std::memset(data_, 0, bytes());
}

size_t PageBuffer::resident_bytes() const {
  if (!data_) return 0;
  const size_t ps = page_size();
  std::vector<unsigned char> v(mapped_ / ps);
  if (mincore(data_, mapped_, v.data()) != 0) return bytes();
  size_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n * ps;
}

}  // namespace kiln
