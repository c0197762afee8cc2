// The Slurm batch script kiln submit writes, and reading a task's place from Slurm's environment.
#include "launch/slurm.h"

#include <gtest/gtest.h>

#include <stdlib.h>
#include <fstream>

#include "launch/job_env.h"
#include "test_util.h"

namespace kiln {
namespace {

TEST(Slurm, TasksPerNodeExpandsRepeats) {
  EXPECT_EQ(slurm_tasks_on_node("2", 0), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 0), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 2), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 3), 1);
  EXPECT_EQ(slurm_tasks_on_node("4,2(x2)", 2), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 4), 0);  // no such node
}

TEST(Slurm, BatchScriptAsksForRequeueAndTheWarningSignalAndRequeuesOnTheStopCode) {
  SubmitOptions o;
  o.config = "/abs/my config.toml";
  o.sets = {"train.zero=1", "train.sample_prompt=it's"};
  o.kiln_binary = "/opt/kiln/kiln";
  o.workdir = "/work/dir";
  o.out_dir = "/runs/x";
  o.nodes = 2;
  o.ntasks_per_node = 4;
  o.cpus_per_task = 8;
  o.time = "2:00:00";
  o.gres = "gpu:4";
  o.signal_seconds = 300;
  std::string s = sbatch_script(o);
  for (const char* want :
       {"#SBATCH --nodes=2\n", "#SBATCH --ntasks-per-node=4\n", "#SBATCH --cpus-per-task=8\n",
        "#SBATCH --time=2:00:00\n", "#SBATCH --gres=gpu:4\n", "#SBATCH --requeue\n",
        "#SBATCH --signal=USR1@300\n", "#SBATCH --chdir=/work/dir\n",
        "#SBATCH --output=/runs/x/slurm-%j.out\n", "#SBATCH --open-mode=append\n",
        "srun --mpi=pmix /opt/kiln/kiln train '/abs/my config.toml' --set train.resume=auto "
        "--set train.zero=1 --set 'train.sample_prompt=it'\\''s'",
        "if [ $rc -eq 75 ]; then", "scontrol requeue \"$SLURM_JOB_ID\""})
    EXPECT_NE(s.find(want), std::string::npos) << want << "\n" << s;
  EXPECT_EQ(s.find("--partition"), std::string::npos);  // not asked for: not written
}

// --max-restarts: a failed run (not a requested stop, a refused input or divergence) is recorded,
// its nodes counted, a node named twice excluded, and the job requeued while restarts remain.
// The script is valid bash either way.
TEST(Slurm, MaxRestartsRequeuesAFailedRunAndTheScriptIsValidBash) {
  SubmitOptions o;
  o.config = "/c.toml";
  o.kiln_binary = "/k";
  o.workdir = "/w";
  o.out_dir = "/runs/my run";
  kiln::testing::TempDir dir;
  for (int restarts : {0, 2}) {
    o.max_restarts = restarts;
    const std::string s = sbatch_script(o);
    const bool on = restarts > 0;
    for (const char* want : {"elif [ $rc -ne 0 ] && [ $rc -ne 78 ] && [ $rc -ne 65 ]; then",
                             "(restart $((restarts + 1)) of 2)", "\"type\":\"restart\"",
                             ">> '/runs/my run'/failed-nodes", "2> >(tee \"$errs\" >&2)"})
      EXPECT_EQ(s.find(want) != std::string::npos, on) << restarts << ": " << want << "\n" << s;
    const std::string path = dir / "job.sbatch";
    std::ofstream(path) << s;
    auto r = kiln::testing::run_command("bash -n " + path + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << r.output << "\n" << s;
  }
  auto bad = kiln::testing::run_kiln("submit " + kiln::testing::source_path("configs/tiny.toml") +
                                     " --dry-run --max-restarts -1");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--max-restarts"), std::string::npos) << bad.output;
}

// --min-nodes: Slurm may give the job fewer nodes; the script then trains fewer data-parallel
// replicas with grad_accum grown to keep the global batch, and gives back a node named in two
// failures (the multi-node integration test runs it on a real Slurm).
TEST(Slurm, MinNodesShrinksTheLayoutAndLeavesOutANodeThatFailedTwice) {
  SubmitOptions o;
  o.config = "/c.toml";
  o.kiln_binary = "/k";
  o.workdir = "/w";
  o.out_dir = "/runs/r";
  o.nodes = 4;
  o.ntasks_per_node = 2;
  o.ranks_per_replica = 2;  // tp x pp
  o.grad_accum = 3;
  o.min_nodes = 2;
  o.max_restarts = 2;
  const std::string s = sbatch_script(o);
  for (const char* want :
       {"#SBATCH --nodes=2-4\n", "micro=12", "replicas=$((SLURM_JOB_NUM_NODES * 2 / 2))",
        "--set parallel.dp=$replicas --set train.grad_accum=$((micro / replicas))",
        "srun --mpi=pmix -N \"$SLURM_JOB_NUM_NODES\" -n $((SLURM_JOB_NUM_NODES * 2))",
        "scontrol update JobId=\"$SLURM_JOB_ID\" NodeList=\"$keep\"",
        "slurm_job_${SLURM_JOB_ID}_resize.sh", "-ge 2 ]"})
    EXPECT_NE(s.find(want), std::string::npos) << want << "\n" << s;
  kiln::testing::TempDir dir;
  std::ofstream(dir / "job.sbatch") << s;
  auto r = kiln::testing::run_command("bash -n " + (dir / "job.sbatch") + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output << "\n" << s;
  // Without it: the nodes asked for, and the config's layout as it is.
  o.min_nodes = 0;
  const std::string fixed = sbatch_script(o);
  EXPECT_NE(fixed.find("#SBATCH --nodes=4\n"), std::string::npos);
  EXPECT_EQ(fixed.find("parallel.dp"), std::string::npos);
  for (const std::string bad : {"--nodes 2 --min-nodes 3", "--nodes 2 --min-nodes -1",
                                "--nodes 2 --min-nodes 1 --set parallel.tp=2"}) {
    auto b = kiln::testing::run_kiln("submit " + kiln::testing::source_path("configs/tiny.toml") +
                                     " --dry-run " + bad);
    EXPECT_NE(b.exit_code, 0) << bad;
    EXPECT_NE(b.output.find("--min-nodes"), std::string::npos) << bad << "\n" << b.output;
  }
}

TEST(Slurm, SbatchLinesQuotePathsWithSpacesQuotesAndHashes) {
  EXPECT_EQ(sbatch_quote("/runs/x/slurm-%j.out"), "/runs/x/slurm-%j.out");
  EXPECT_EQ(sbatch_quote("/my runs/x"), "\"/my runs/x\"");
  EXPECT_EQ(sbatch_quote("a\"b\\c#d"), "\"a\\\"b\\\\c#d\"");
  EXPECT_THROW(sbatch_quote("two\nlines"), Error);
  SubmitOptions o;
  o.config = "/c.toml";
  o.kiln_binary = "/k";
  o.workdir = "/work dir";
  o.out_dir = "/runs/my run #2";
  o.job_name = "my job";
  std::string s = sbatch_script(o);
  for (const char* want : {"#SBATCH --output=\"/runs/my run #2/slurm-%j.out\"\n",
                           "#SBATCH --chdir=\"/work dir\"\n", "#SBATCH --job-name=\"my job\"\n"})
    EXPECT_NE(s.find(want), std::string::npos) << want << "\n" << s;
}

TEST(Slurm, SubmitDryRunChecksTheConfigAndPrintsTheScript) {
  auto r = kiln::testing::run_kiln("submit " + kiln::testing::source_path("configs/tiny.toml") +
                                   " --dry-run --ntasks-per-node 2 -J tinyjob");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("#SBATCH --job-name=tinyjob"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--signal=USR1@120"), std::string::npos) << r.output;
  auto bad = kiln::testing::run_kiln("submit " + kiln::testing::source_path("configs/tiny.toml") +
                                     " --dry-run --set train.stepz=3");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("train.stepz"), std::string::npos) << bad.output;
}

TEST(JobEnv, ReadsASlurmTasksPlace) {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"}) unsetenv(v);
  setenv("SLURM_STEP_ID", "0", 1);
  setenv("SLURM_PROCID", "5", 1);
  setenv("SLURM_STEP_NUM_TASKS", "7", 1);
  setenv("SLURM_LOCALID", "1", 1);
  setenv("SLURM_NODEID", "2", 1);
  setenv("SLURM_STEP_NUM_NODES", "3", 1);
  setenv("SLURM_STEP_TASKS_PER_NODE", "3,2(x2)", 1);
  setenv("SLURM_JOB_ID", "42", 1);
  setenv("SLURM_CPUS_PER_TASK", "6", 1);
  JobEnv e = job_env();
  EXPECT_EQ(e.launcher, "slurm");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world, 7);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_size, 2);
  EXPECT_EQ(e.node, 2);
  EXPECT_EQ(e.nodes, 3);
  EXPECT_EQ(e.job_id, "42");
  EXPECT_EQ(e.cpus_per_task, 6);
  for (const char* v :
       {"SLURM_STEP_ID", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_NODEID",
        "SLURM_STEP_NUM_NODES", "SLURM_STEP_TASKS_PER_NODE", "SLURM_JOB_ID", "SLURM_CPUS_PER_TASK"})
    unsetenv(v);
  EXPECT_EQ(job_env().launcher, "none");
}

}  // namespace
}  // namespace kiln
