// The direct algorithm of the shared-memory engine (src/comm/shm_algo_direct.cpp), forced
// by name: all-reduce and reduce-scatter against the reference summed in rank
// order, fp32 and bf16, on awkward sizes and counts.
#include <gtest/gtest.h>

#include "comm/shm_algorithm_check.h"

namespace kiln {
namespace {

TEST(ShmAlgorithms, DirectAllReduceMatchesTheReferenceInItsOrderOnEverySize) {
  test::check_all_reduce_on_every_size("direct");
}

TEST(ShmAlgorithms, DirectReduceScatterMatchesTheReferenceWithEvenAndUnevenCounts) {
  test::check_reduce_scatter_on_every_size("direct", "direct");
}

}  // namespace
}  // namespace kiln
