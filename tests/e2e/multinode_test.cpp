// Several nodes simulated on this machine (scripts/netns-cluster.sh: network namespaces joined
// by a bridge, OpenMPI's daemons started through `ip netns exec`): the collectives test runs on
// 2 hosts × 2 ranks, where ranks share memory inside a host and talk TCP between hosts, and
// comm.backend = "auto" must find the two hosts and choose the hierarchical backend. Needs root
// and iproute2; skipped, saying why, otherwise. The cluster is removed afterwards.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>

#include "test_util.h"

namespace kiln {
namespace {

testing::RunResult run_shell(const std::string& cmd) {
  testing::RunResult r{0, ""};
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

class SimulatedCluster {
 public:
  SimulatedCluster() {
    // Its own name, so that it never touches a cluster someone else has up.
    env_ = "KILNSIM_PREFIX=kt" + std::to_string(getpid() % 100000) + "n ";
    script_ = testing::source_path("scripts/netns-cluster.sh");
  }
  ~SimulatedCluster() { run_shell(env_ + script_ + " down"); }
  testing::RunResult operator()(const std::string& args) {
    return run_shell(env_ + script_ + " " + args);
  }

 private:
  std::string env_, script_;
};

TEST(MultiNode, CollectivesAcrossTwoSimulatedHostsUseTheHierarchy) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to create network namespaces";
  if (run_shell("ip netns list").exit_code != 0)
    GTEST_SKIP() << "needs iproute2 with network namespaces (ip netns)";
  SimulatedCluster cluster;
  auto up = cluster("up 2");
  ASSERT_EQ(up.exit_code, 0) << up.output;
  for (const char* backend : {"auto", "hier"}) {
    auto r = cluster(std::string("run -- -np 4 -x OMP_NUM_THREADS=1 -x KILN_TEST_COMM_BACKEND=") +
                     backend + " -x KILN_TEST_COMM_EXPECT=hier " + KILN_MPI_TESTS +
                     " --gtest_filter=Collectives.*");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(count_of(r.output, "[  PASSED  ]"), 4u) << r.output;
  }
}

}  // namespace
}  // namespace kiln
