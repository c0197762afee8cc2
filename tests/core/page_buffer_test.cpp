// PageBuffer: its own mapping (pages handed back on release) and adopted memory (a
// communicator's shared memory, which it must neither unmap nor hand back).
#include "core/page_buffer.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace kiln {
namespace {

TEST(PageBuffer, ReleasedPagesReadZeroAndLeaveMemory) {
  const size_t n = 1 << 20;  // 4 MiB
  PageBuffer b(n);
  for (size_t i = 0; i < n; i++) b.data()[i] = 1.0f;
  const size_t before = b.resident_bytes();
  EXPECT_GE(before, n * sizeof(float));
  b.release(1000, n);
  EXPECT_LT(b.resident_bytes(), before / 2);  // before reading them (a read maps a zero page)
  for (size_t i = 0; i < 1000; i++) ASSERT_EQ(b.data()[i], 1.0f) << i;
  for (size_t i = 1000; i < n; i++) ASSERT_EQ(b.data()[i], 0.0f) << i;
}

TEST(PageBuffer, AdoptedMemoryIsZeroedOnReleaseAndNotUnmapped) {
  const size_t n = 4096 + 17;
  std::shared_ptr<void> owner(std::aligned_alloc(4096, 5 * 4096 * sizeof(float)), std::free);
  float* mem = static_cast<float*>(owner.get());
  for (size_t i = 0; i < n; i++) mem[i] = 2.0f;
  {
    PageBuffer b(mem, n, owner, /*removable=*/false);
    EXPECT_EQ(b.data(), mem);
    EXPECT_EQ(b.size(), n);
    b.release(10, n);
    for (size_t i = 0; i < 10; i++) ASSERT_EQ(mem[i], 2.0f) << i;
    for (size_t i = 10; i < n; i++) ASSERT_EQ(mem[i], 0.0f) << i;
    PageBuffer moved = std::move(b);
    EXPECT_EQ(moved.data(), mem);
  }
  mem[n - 1] = 3.0f;  // still ours after both buffers are gone
  EXPECT_EQ(mem[n - 1], 3.0f);
  EXPECT_EQ(owner.use_count(), 1);
}

TEST(PageBuffer, AdoptingWithoutAnOwnerIsRefused) {
  float x[4] = {};
  EXPECT_THROW(PageBuffer(x, 4, nullptr, false), std::invalid_argument);
}

// A shared mapping of a memfd (what Communicator::alloc_shared gives): released pages leave the
// file, so they read as zero and hold no memory, for this mapping and any other of the file.
TEST(PageBuffer, ReleasedPagesOfASharedMappingLeaveTheFile) {
  const size_t n = 1 << 20, bytes = n * sizeof(float);
  const int fd = memfd_create("kiln-test", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  void* other = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_NE(other, MAP_FAILED);
  std::shared_ptr<void> owner(p, [bytes](void* q) { munmap(q, bytes); });
  PageBuffer b(static_cast<float*>(p), n, owner, /*removable=*/true);
  for (size_t i = 0; i < n; i++) b.data()[i] = 1.0f;
  const size_t before = b.resident_bytes();
  EXPECT_GE(before, bytes);
  b.release(1000, n);
  EXPECT_LT(b.resident_bytes(), before / 2);
  const float* seen = static_cast<const float*>(other);
  for (size_t i = 0; i < 1000; i++) ASSERT_EQ(seen[i], 1.0f) << i;
  for (size_t i = 1000; i < n; i++) ASSERT_EQ(seen[i], 0.0f) << i;
  munmap(other, bytes);
}

}  // namespace
}  // namespace kiln
