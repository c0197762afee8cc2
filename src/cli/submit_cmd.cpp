#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file.h"
#include "launch/slurm.h"
#include "train/config.h"

namespace kiln::cli {

void register_submit(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "submit",
      "Submit a training run to Slurm (sbatch), checkpointing and requeueing on its "
      "warning signal");
  auto o = std::make_shared<SubmitOptions>();
  auto dry_run = std::make_shared<bool>(false);
  cmd->add_option("config", o->config, "TOML config")->required();
  cmd->add_option("--set", o->sets, "override a config key: section.key=value (repeatable)");
  cmd->add_option("-N,--nodes", o->nodes, "nodes")->capture_default_str();
  cmd->add_option("--ntasks-per-node", o->ntasks_per_node, "ranks per node")->capture_default_str();
  cmd->add_option("--cpus-per-task", o->cpus_per_task, "cores per rank (its threads)");
  cmd->add_option("-t,--time", o->time, "time limit, e.g. 2:00:00");
  cmd->add_option("-p,--partition", o->partition, "partition");
  cmd->add_option("--gres", o->gres, "generic resources, e.g. gpu:4");
  cmd->add_option("-J,--job-name", o->job_name, "job name")->capture_default_str();
  cmd->add_option("--signal-seconds", o->signal_seconds,
                  "Slurm sends USR1 this long before the time limit; kiln checkpoints on it")
      ->capture_default_str();
  cmd->add_option("--max-restarts", o->max_restarts,
                  "requeue the job after a failed run (a crashed rank, a hang) at most this many "
                  "times; a node named in two failures is excluded")
      ->capture_default_str();
  cmd->add_option("--min-nodes", o->min_nodes,
                  "elastic: start or requeue on as few as this many nodes, with fewer "
                  "data-parallel replicas and the same global batch (grad_accum grows)");
  cmd->add_option("--sbatch-arg", o->sbatch_args,
                  "an extra #SBATCH argument, e.g. --sbatch-arg=--account=ml (repeatable)");
  cmd->add_flag("--dry-run", *dry_run, "print the batch script instead of submitting it");
  cmd->callback([o, dry_run]() {
    namespace fs = std::filesystem;
    if (o->nodes < 1 || o->ntasks_per_node < 1)
      fail("submit: --nodes and --ntasks-per-node must be at least 1");
    if (o->signal_seconds < 1) fail("submit: --signal-seconds must be at least 1");
    if (o->max_restarts < 0) fail("submit: --max-restarts must not be negative");
    if (o->min_nodes < 0 || o->min_nodes > o->nodes)
      fail("submit: --min-nodes must be between 1 and --nodes ({}), got {}", o->nodes,
           o->min_nodes);
    // The config is checked here, not minutes later on a compute node.
    TrainConfig cfg = load_train_config(o->config, o->sets);
    o->ranks_per_replica = cfg.tp * cfg.pp;
    o->grad_accum = cfg.grad_accum;
    if (o->min_nodes > 0 && (o->min_nodes * o->ntasks_per_node) % o->ranks_per_replica != 0)
      fail(
          "submit: --min-nodes {} x --ntasks-per-node {} ranks do not hold whole replicas of "
          "parallel.tp x parallel.pp = {} ranks",
          o->min_nodes, o->ntasks_per_node, o->ranks_per_replica);
    o->config = fs::absolute(o->config).string();
    o->workdir = fs::current_path().string();
    o->out_dir = fs::absolute(cfg.out_dir).lexically_normal().string();
    o->kiln_binary = self_executable();
    if (o->kiln_binary.empty()) fail("submit: cannot find the kiln executable");
    if (*dry_run) {
      fmt::print("{}", sbatch_script(*o));
      return;
    }
    std::string script;
    std::string id = submit_job(*o, &script);
    fmt::print("submitted job {} ({}); log: {}/slurm-{}.out\n", id, script, o->out_dir, id);
  });
}

}  // namespace kiln::cli
