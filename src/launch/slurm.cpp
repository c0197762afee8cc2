#include "launch/slurm.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/exit_codes.h"
#include "core/file.h"

namespace kiln {

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789_-./=:,+@%") == std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string sbatch_quote(const std::string& s) {
  if (s.find_first_of("\n\r") != std::string::npos)
    fail("submit: '{}' holds a line break, which a #SBATCH line cannot carry", s);
  if (!s.empty() && s.find_first_of(" \t\"'\\#") == std::string::npos) return s;
  // sbatch reads #SBATCH arguments with double quotes and backslash escapes; an unquoted # would
  // start a comment.
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string sbatch_script(const SubmitOptions& o) {
  std::string s = "#!/bin/bash\n";
  s +=
      "# Written by `kiln submit`: one `kiln train` task per rank, started by srun through PMIx.\n";
  auto line = [&](const std::string& arg) { s += "#SBATCH " + arg + "\n"; };
  line("--job-name=" + sbatch_quote(o.job_name));
  const bool elastic = o.min_nodes > 0 && o.min_nodes < o.nodes;
  line(elastic ? fmt::format("--nodes={}-{}", o.min_nodes, o.nodes)
               : fmt::format("--nodes={}", o.nodes));
  line(fmt::format("--ntasks-per-node={}", o.ntasks_per_node));
  if (o.cpus_per_task > 0) line(fmt::format("--cpus-per-task={}", o.cpus_per_task));
  if (!o.time.empty()) line("--time=" + sbatch_quote(o.time));
  if (!o.partition.empty()) line("--partition=" + sbatch_quote(o.partition));
  if (!o.gres.empty()) line("--gres=" + sbatch_quote(o.gres));
  line("--requeue");
  line(fmt::format("--signal=USR1@{}", o.signal_seconds));
  line("--chdir=" + sbatch_quote(o.workdir));
  line("--output=" + sbatch_quote(o.out_dir + "/slurm-%j.out"));
  line("--open-mode=append");  // a requeued job adds to the same log
  for (const auto& a : o.sbatch_args) line(a);
  s += "\n";
  s += "# The warning signal is for the tasks (they checkpoint and exit); the batch shell only\n";
  s += "# notes it and waits for them.\n";
  s += "trap 'echo \"kiln: job $SLURM_JOB_ID got the warning signal (USR1)\"' USR1\n";
  s += "echo \"kiln: job $SLURM_JOB_ID on $SLURM_JOB_NODELIST, restart "
       "${SLURM_RESTART_COUNT:-0}\"\n";
  const std::string out = shell_quote(o.out_dir);
  if (elastic && o.max_restarts > 0) {
    // A node named in two failed runs is left out of this attempt: the allocation shrinks to the
    // other nodes (Slurm cannot exclude nodes from a running job's requeue, but a running job
    // may give nodes back), when enough remain.
    s += "bad=$(sort " + out + "/failed-nodes 2> /dev/null | uniq -c | awk '$1 >= 2 {print $2}')\n";
    s += "keep=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | grep -vxF \"${bad:-@}\" | "
         "paste -sd, -)\n";
    s += "if [ -n \"$bad\" ] && [ \"$keep\" != \"$(scontrol show hostnames "
         "\"$SLURM_JOB_NODELIST\" | paste -sd, -)\" ]; then\n";
    s += fmt::format("  if [ \"$(echo \"$keep\" | tr , '\\n' | grep -c .)\" -ge {} ]; then\n",
                     o.min_nodes);
    s += "    echo \"kiln: leaving out node(s) $(echo $bad), named in two failures\"\n";
    s += "    (cd " + out + " && scontrol update JobId=\"$SLURM_JOB_ID\" NodeList=\"$keep\")\n";
    s += "    . " + out + "/slurm_job_${SLURM_JOB_ID}_resize.sh\n";
    s += "  else\n";
    s += fmt::format(
        "    echo \"kiln: node(s) $(echo $bad) named in two failures, but the job needs at "
        "least {} node(s): running on all of them\"\n",
        o.min_nodes);
    s += "  fi\n";
    s += "fi\n";
  }
  // No --kill-on-bad-exit: after a stop every task exits with the requeue code, and killing the
  // slower ones would hide it. A rank that fails ends the whole job itself (MPI_Abort).
  // Elastic: the tasks of the nodes this attempt has (SLURM_NTASKS keeps the submission's).
  std::string cmd =
      "srun --mpi=pmix " +
      (elastic ? fmt::format("-N \"$SLURM_JOB_NUM_NODES\" -n $((SLURM_JOB_NUM_NODES * {})) ",
                             o.ntasks_per_node)
               : std::string()) +
      shell_quote(o.kiln_binary) + " train " + shell_quote(o.config) + " --set train.resume=auto";
  for (const auto& kv : o.sets) cmd += " --set " + shell_quote(kv);
  if (elastic) {
    // On fewer nodes than asked for: fewer data-parallel replicas, the same global batch.
    const int64_t replicas =
        static_cast<int64_t>(o.nodes) * o.ntasks_per_node / o.ranks_per_replica;
    s += fmt::format("micro={}  # micro-batches per step, job-wide, on all {} nodes\n",
                     replicas * o.grad_accum, o.nodes);
    s += fmt::format("replicas=$((SLURM_JOB_NUM_NODES * {} / {}))\n", o.ntasks_per_node,
                     o.ranks_per_replica);
    s += fmt::format("if [ \"$SLURM_JOB_NUM_NODES\" -lt {} ]; then\n", o.nodes);
    s += "  if [ $((micro % replicas)) -ne 0 ]; then\n";
    s += "    echo \"kiln: $micro micro-batches per step do not divide among $replicas replicas "
         "on $SLURM_JOB_NUM_NODES nodes; not training\"\n";
    s += "    exit 1\n";
    s += "  fi\n";
    s += fmt::format(
        "  echo \"kiln: on $SLURM_JOB_NUM_NODES of {} nodes: $replicas data-parallel replicas, "
        "train.grad_accum $((micro / replicas))\"\n",
        o.nodes);
    s += "  layout=\"--set parallel.dp=$replicas --set train.grad_accum=$((micro / replicas))\"\n";
    s += "fi\n";
    cmd += " ${layout:-}";
  }
  if (o.max_restarts > 0) {
    // srun's own errors name the node of a task that failed ("srun: error: NODE: task 3: ...");
    // a copy of them is kept per attempt for the failure's record.
    s += "errs=" + out + "/srun-$SLURM_JOB_ID-${SLURM_RESTART_COUNT:-0}.err\n";
    cmd += " 2> >(tee \"$errs\" >&2)";
  }
  s += cmd + " &\n";
  // Waiting in the background lets the trap run while srun goes on; wait again after a signal.
  s += "pid=$!\n";
  s += "rc=0\nwhile kill -0 $pid 2> /dev/null; do\n  wait $pid\n  rc=$?\ndone\n";
  s += fmt::format("if [ $rc -eq {} ]; then\n", kExitStoppedForRequeue);
  s += "  echo \"kiln: checkpoint written on request; requeueing job $SLURM_JOB_ID\"\n";
  s += "  scontrol requeue \"$SLURM_JOB_ID\"\n";
  if (o.max_restarts > 0) {
    s += fmt::format("elif [ $rc -ne 0 ] && [ $rc -ne {} ] && [ $rc -ne {} ]; then\n",
                     kExitBadInput, kExitNonFinite);
    s += "  # A failed run (a crashed rank, or a hang the watchdog ended): record it, count the\n";
    s += "  # node srun blames first (it kills every other task after the first fails, and names\n";
    s += "  # their nodes too; all of the job's when it names none), requeue.\n";
    s += "  restarts=${SLURM_RESTART_COUNT:-0}\n";
    s += "  nodes=$(sed -n 's/^srun: error: \\([^:]*\\): task.*/\\1/p' \"$errs\" | head -1)\n";
    s += "  [ -n \"$nodes\" ] || nodes=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\")\n";
    s += "  for n in $nodes; do echo \"$n\" >> " + out + "/failed-nodes; done\n";
    s += "  step=$(sed -n 's/.*\"step\": *\\([0-9]*\\).*/\\1/p' " + out +
         "/progress.json 2> /dev/null)\n";
    s += fmt::format("  again=false; [ \"$restarts\" -lt {} ] && again=true\n", o.max_restarts);
    s += "  printf '{\"type\":\"restart\",\"time\":%s,\"attempt\":%d,\"rank\":-1,\"how\":\"exit "
         "code %d\",\"after_step\":%s,\"message\":\"slurm job %s: the run failed on %s (exit "
         "code %d)\",\"restarting\":%s,\"slurm_job_id\":\"%s\"}\\n' \"$(date +%s)\" "
         "$((restarts + 1)) $rc \"${step:--1}\" \"$SLURM_JOB_ID\" \"$(echo $nodes)\" $rc $again "
         "\"$SLURM_JOB_ID\" >> " +
         out + "/metrics.jsonl\n";
    s += "  if $again; then\n";
    s += fmt::format(
        "    echo \"kiln: the run failed (exit code $rc) on $(echo $nodes); requeueing job "
        "$SLURM_JOB_ID (restart $((restarts + 1)) of {})\"\n",
        o.max_restarts);
    s += "    scontrol requeue \"$SLURM_JOB_ID\"\n";
    s += "  else\n";
    s += fmt::format(
        "    echo \"kiln: the run failed (exit code $rc); not requeued: {} restart(s) used\"\n",
        o.max_restarts);
    s += "  fi\n";
  }
  s += "fi\n";
  s += "exit $rc\n";
  return s;
}

std::string submit_job(const SubmitOptions& o, std::string* script_path) {
  namespace fs = std::filesystem;
  fs::create_directories(o.out_dir);
  std::string path = (fs::path(o.out_dir) / (o.job_name + ".sbatch")).string();
  write_file_atomic(path, sbatch_script(o));
  fs::permissions(path, fs::perms::owner_exec, fs::perm_options::add);
  if (script_path) *script_path = path;
  std::string cmd = "sbatch --parsable " + shell_quote(path) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) fail("submit: cannot run sbatch");
  std::string out;
  std::array<char, 512> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail("submit: sbatch {} failed{}: {}", path,
         WIFEXITED(status) && WEXITSTATUS(status) == 127 ? " (is Slurm installed? sbatch not found)"
                                                         : "",
         out.empty() ? "no output" : out);
  // --parsable prints "jobid" or "jobid;cluster".
  std::string id = out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
  id = id.substr(0, id.find(';'));
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
    fail("submit: sbatch {} answered '{}', not a job id", path, out);
  return id;
}

}  // namespace kiln
