// The halving-doubling algorithm of the shared-memory engine
// (src/comm/shm_algo_halving_doubling.cpp), forced by name: all-reduce and reduce-scatter against
// the reference summed as its tree, fp32 and bf16, on awkward sizes and counts.
#include <gtest/gtest.h>

#include "comm/shm_algorithm_check.h"

namespace kiln {
namespace {

TEST(ShmAlgorithms, HalvingDoublingAllReduceMatchesTheReferenceInItsOrderOnEverySize) {
  test::check_all_reduce_on_every_size("halving_doubling");
}

TEST(ShmAlgorithms, HalvingDoublingReduceScatterMatchesTheReferenceWithEvenAndUnevenCounts) {
  test::check_reduce_scatter_on_every_size("halving_doubling", "halving_doubling");
}

}  // namespace
}  // namespace kiln
