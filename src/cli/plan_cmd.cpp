// `kiln plan`: how to lay a model out on a cluster, how long training takes and what it costs
// (the models live in src/plan); `kiln plan --calibrate` is in plan_calibrate.cpp.
#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/plan_calibrate.h"
#include "cli/plan_catalog.h"
#include "cli/plan_opts.h"
#include "core/buffer.h"
#include "core/clock.h"
#include "core/closest_name.h"
#include "core/error.h"
#include "core/file.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "plan/goodput.h"
#include "plan/planner.h"
#include "plan/report.h"
#include "plan/sizing.h"
#include "train/config.h"

namespace fs = std::filesystem;

namespace kiln::cli {
namespace {

using namespace kiln::plan;

// The matmuls run over the padded vocabulary.
ModelSpec model_from_config(const TrainConfig& cfg) {
  return model_spec(cfg.model, /*padded=*/true, fs::path(cfg.source).stem().string());
}

double gib(double bytes) {
  return bytes / double(1 << 30);
}

void plan_budget(const PlanOpts& o, const PlanInputs& in, const Estimate& e);

// The fields the search varied besides dp (which follows from the others), as "a, b and c": a
// key the layout left out is not searched where the software or job allows one value only.
std::string searched_names(const SearchResult& r) {
  std::vector<std::string> names;
  for (const SearchField& f : r.searched)
    if (f.key != "dp") names.push_back(f.key);
  return names.empty() ? "nothing" : join_names(names, "and");
}

// A --layout that leaves keys out: the fastest layout with the given keys, after the table of
// the search over the rest.
void plan_partial(const PlanOpts& o, const PlanInputs& in, const LayoutKeys& keys,
                  const Layout& given, const SearchResult& r) {
  const std::string fixed = keys.given(given);
  nlohmann::json searched = {{"given", fixed},
                             {"searched_keys", searched_names(r)},
                             {"layouts_considered", r.considered},
                             {"layouts_fitting", r.fitting.size()},
                             {"fields", search_fields_json(r)}};
  if (r.fitting.empty()) {
    const Estimate& least = r.least_memory;
    const SearchResult any = search(in.model, in.cluster, in.job);
    // On more nodes with the same fields (the network decides whether there can be more).
    const bool network = in.cluster.nic_gbps > 0 && in.cluster.nics_per_node > 0;
    FitResult more;
    if (network)
      more = fewest_nodes_that_fit(in.model, in.cluster, in.job, FixedFields{given, keys});
    std::string way;
    if (more.found)
      way = fmt::format(
          "with them it fits from {} nodes (--nodes {} --layout {}: {:.1f} GiB, {:.3g} s/step)",
          more.cluster.nodes, more.cluster.nodes, more.best.layout.to_string(),
          gib(more.best.memory.total), more.best.time.step);
    if (!any.fitting.empty()) {
      const Estimate& b = any.fitting.front();
      way += fmt::format("{}without them, {} fits ({:.1f} GiB, {:.3g} s/step)",
                         way.empty() ? "" : "; ", b.layout.to_string(), gib(b.memory.total),
                         b.time.step);
    } else if (!more.found) {
      way = fmt::format("{}the cluster {}",
                        network && more.searched_to > in.cluster.nodes
                            ? fmt::format("with them it fits on no cluster of up to {} nodes "
                                          "(searched); without them ",
                                          more.searched_to)
                            : "",
                        fit_advice(in.model, in.cluster, in.job));
    }
    const std::string msg = fmt::format(
        "no layout with {} fits on {} ({} tried; the one needing the least memory, {}, needs "
        "{:.1f} of {:.1f} GiB); {}",
        fixed, in.cluster.describe(), r.considered, least.layout.to_string(),
        gib(least.memory.total), gib(least.memory.capacity), way);
    if (o.json) {
      nlohmann::json j = search_json(r, in, o.top);
      j["search"] = searched;
      j["advice"] = msg;
      fmt::print("{}\n", j.dump(2));
      return;
    }
    fail("{}: {}", in.model.name, msg);
  }
  const Estimate& best = r.fitting.front();
  if (o.budget > 0) return plan_budget(o, in, best);
  if (o.json) {
    // A full search's keys (best, faster_but_out_of_memory, fields, layouts_considered,
    // layouts_fitting), then the best layout's estimate at the top level and the partial
    // layout's own summary under "search".
    nlohmann::json j = search_json(r, in, o.top);
    j.update(estimate_json(best, in));
    searched["others"] = nlohmann::json::array();
    for (int i = 1; i < int(r.fitting.size()) && i < o.top; i++)
      searched["others"].push_back(
          {{"layout", r.fitting[i].layout.to_string()}, {"step_time_s", r.fitting[i].time.step}});
    j["search"] = searched;
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("{}\n--layout {}: {} searched", inputs_text(in), fixed, searched_names(r));
  fmt::print("{}", search_table(r, o.top));
  fmt::print("\nthe best layout with {} in detail:\n{}", fixed, estimate_text(best, in));
  if (!o.config.empty() && in.cluster.device.cpu)
    fmt::print("\nmeasure it: kiln bench train --config {}{}\n", o.config,
               o.sets.empty() ? "" : " --set ...");
}

// A positive, finite number for `flag` (days, dollars).
void check_positive(double v, const char* flag, const char* what) {
  if (!std::isfinite(v) || !(v > 0))
    fail("{} ({}) must be a positive number, got {}", flag, what, v);
}

// --days D: the smallest cluster of whole nodes that trains the job in D days.
// slices_fixed: --slices (or a hardware file's cluster.slices above 1) was given.
void plan_days(const PlanOpts& o, const PlanInputs& in, const FixedFields& fixed,
               bool slices_fixed) {
  // A sane cap: 131,072 devices, more than the largest published training clusters; a
  // description with no network between nodes stays on one node.
  const bool network = in.cluster.nics_per_node > 0 && in.cluster.nic_gbps > 0;
  // A torus keeps the number of slices --slices gives; without it the search splits sizes
  // beyond a pod into the fewest slices over the data-centre network, up to the same cap.
  const bool torus = in.cluster.topology == Topology::torus;
  const bool fixed_slices = torus && slices_fixed;
  const int pod = in.cluster.device.max_slice_chips;
  const int max_slices = torus && !fixed_slices ? std::max(1, (1 << 17) / pod) : 1;
  const int max_devices = fixed_slices ? pod * in.cluster.slices : 1 << 17;
  const int max_nodes = network ? std::max(1, max_devices / in.cluster.gpus_per_node) : 1;
  const DeadlineResult r =
      smallest_cluster_for_days(in.model, in.cluster, in.job, o.days, fixed, max_nodes, max_slices);
  const int per = in.cluster.gpus_per_node;
  if (!r.found && r.fastest_nodes > 0 && !std::isfinite(r.fastest_days))
    fail(
        "--days {:g}: at every size that fits ({} to {} nodes of {} × {}), failures would come "
        "faster than the job of {} restarts and checkpoints, and under {:g}% of the time would "
        "train: no deadline is met; check --failures-per-gpu-hour ({:g} per device-hour) and "
        "--restart-minutes ({:g})",
        o.days, r.first_nodes, max_nodes, per, in.cluster.device.name, in.model.name,
        100 * kMinGoodput, in.job.failures_per_gpu_hour, in.job.restart_minutes);
  if (!r.found) {
    std::string seen =
        r.fastest_nodes > 0
            ? fmt::format("the fastest was {:.1f} days with failures on {} nodes ({} devices)",
                          r.fastest_days, r.fastest_nodes, int64_t(r.fastest_nodes) * per)
        : r.sizes_runnable == 0
            ? fmt::format(
                  "on none of them does the global batch of {} sequences split over the "
                  "devices (dp must divide it)",
                  in.job.global_batch_seqs())
            : "the model fits in memory on none of them";
    if (r.sizes_tried == 0)
      seen =
          fmt::format("even at the sustained matmul rate it needs at least {} nodes ({} devices)",
                      r.first_nodes, int64_t(r.first_nodes) * per);
    fail(
        "--days {:g}: no cluster of up to {} node{} of {} × {} ({} devices{}) trains {} on {} "
        "tokens in {:g} days ({} size{} searched from {} node{}; {}); allow more --days, or "
        "train fewer --tokens{}",
        o.days, max_nodes, max_nodes == 1 ? "" : "s", per, in.cluster.device.name,
        int64_t(max_nodes) * per,
        network ? "" : "; the hardware describes no network between nodes: give --nic-gbps",
        in.model.name, si(in.job.train_tokens), o.days, r.sizes_tried,
        r.sizes_tried == 1 ? "" : "s", r.first_nodes, r.first_nodes == 1 ? "" : "s", seen,
        fixed_slices ? ", or leave out --slices to let the search join more slices" : "");
  }
  const PlanInputs found{in.model, r.cluster, in.job};
  const Estimate& e = r.best;
  if (o.json) {
    nlohmann::json j = inputs_json(found);
    j.update(estimate_json(e, found));
    j["days_target"] = {{"days_max", o.days},
                        {"days_with_failures", r.expected_days},
                        {"nodes", r.cluster.nodes},
                        {"gpus", r.cluster.total_gpus()},
                        {"slices", r.cluster.slices},
                        {"sizes_searched", r.sizes_tried},
                        {"searched_from_nodes", r.first_nodes}};
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print(
      "--days {:g}: the smallest cluster is {} node{} ({} × {}{}), {} in {}; {} size{} searched "
      "from {} node{}, the least that the sustained matmul rate allows)\n\n",
      o.days, r.cluster.nodes, r.cluster.nodes == 1 ? "" : "s", r.cluster.total_gpus(),
      r.cluster.device.label(),
      r.cluster.slices > 1 ? fmt::format(" in {} slices", r.cluster.slices) : "",
      e.layout.to_string(),
      in.job.failures_per_gpu_hour > 0
          ? fmt::format("{:.3g} days with failures ({:.3g} without", r.expected_days, e.days)
          : fmt::format("{:.3g} days (no failures: --failures-per-gpu-hour 0", e.days),
      r.sizes_tried, r.sizes_tried == 1 ? "" : "s", r.first_nodes, r.first_nodes == 1 ? "" : "s");
  fmt::print("{}{}", inputs_text(found), estimate_text(e, found));
}

// --budget USD: the whole steps, tokens and days it buys with the best (or given) layout.
void plan_budget(const PlanOpts& o, const PlanInputs& in, const Estimate& e) {
  const BudgetResult b = what_budget_buys(in.model, in.cluster, in.job, e, o.budget);
  if (b.too_many)
    fail(
        "--budget ${:g} buys more than {:g} optimizer steps of {} on {} (${:.4g} a step at ${:g} "
        "per device-hour): give a budget below ${:.4g}",
        o.budget, kMaxBudgetSteps, in.model.name, in.cluster.describe(), b.usd_per_step,
        in.job.usd_per_gpu_hour, kMaxBudgetSteps * b.usd_per_step);
  if (b.steps == 0)
    fail(
        "--budget ${:g} buys no optimizer step of {} on {}: one step of {} tokens ({}, {:.3g} s) "
        "costs ${:.2f} at ${:g} per device-hour",
        o.budget, in.model.name, in.cluster.describe(), si(e.tokens_per_step), e.layout.to_string(),
        e.time.step, b.usd_per_step, in.job.usd_per_gpu_hour);
  if (o.json) {
    nlohmann::json j = inputs_json(in);
    j.update(estimate_json(e, in));
    j["budget"] = {{"budget_usd", o.budget},
                   {"usd_per_step", b.usd_per_step},
                   {"steps", b.steps},
                   {"tokens", b.tokens},
                   {"tokens_per_param", b.tokens_per_param},
                   {"days", b.days},
                   {"gpu_hours", b.gpu_hours},
                   {"cost_usd", b.cost_usd}};
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("{}{}", inputs_text(in), estimate_text(e, in));
  fmt::print(
      "\n--budget ${:g} at ${:g} per device-hour on {} devices, layout {}:\n"
      "  {} steps of {} tokens = {} tokens ({:.3g} per parameter), {} days, {} GPU-hours, "
      "${}\n  (one step costs ${}; the {} tokens above would cost ${})\n",
      o.budget, in.job.usd_per_gpu_hour, in.cluster.total_gpus(), e.layout.to_string(),
      amount(double(b.steps)), si(e.tokens_per_step), si(b.tokens), b.tokens_per_param,
      amount(b.days), amount(b.gpu_hours), amount(b.cost_usd),
      b.usd_per_step >= 1 ? fmt::format("{:.2f}", b.usd_per_step)
                          : fmt::format("{:.3g}", b.usd_per_step),
      si(in.job.train_tokens), amount(e.cost_usd));
}

void plan(const PlanOpts& o, const Given& g) {
  if (o.list_models) return list_models();
  if (o.list_gpus) return list_gpus();
  if (o.list_software) return list_software();
  // (An empty --config is refused when the file is read: "config file '': No such file".)
  if (o.flag_given("--model") && o.model.empty())
    fail("--model is empty: give a preset name (see --list-models)");
  if (o.config.empty() && o.model.empty()) return summarize(o, g);
  if (!o.config.empty() && !o.model.empty())
    fail(
        "give the model with --model NAME (see --list-models) or --config FILE (a kiln config), "
        "not both");
  if (!o.sets.empty() && o.config.empty()) fail("--set changes a --config; there is none");
  if (o.top < 1) fail("--top (layouts to list from a search) must be at least 1, got {}", o.top);
  if (g.days->count()) check_positive(o.days, "--days", "the longest the run may take");
  if (g.budget->count()) {
    check_positive(o.budget, "--budget", "US dollars to spend");
    if (o.usd < 0) fail("--usd-per-gpu-hour must be a finite price, not negative (got {})", o.usd);
    if (!(o.usd > 0))
      fail(
          "--budget needs a price: give --usd-per-gpu-hour more than 0 (the cost of one "
          "device-hour)");
  }
  if (g.days->count() && g.budget->count())
    fail("give --days (the cluster for a deadline) or --budget (what money buys), not both");
  if (g.days->count() && (g.nodes->count() || g.gpus->count()))
    fail("--days searches the cluster size; leave out {}", g.nodes->count() ? "--nodes" : "--gpus");

  ModelSpec model;
  JobSpec job;
  bool from_config = !o.config.empty();
  if (from_config) {
    TrainConfig cfg = load_train_config(o.config, o.sets);
    model = model_from_config(cfg);
    job.seq_len = cfg.seq_len;
    job.global_batch_tokens = int64_t(cfg.batch_size) * cfg.seq_len * cfg.grad_accum;
    job.train_tokens = double(cfg.steps) * double(job.global_batch_tokens);
    job.dtype = Dtype::fp32;      // what kiln trains in today
    job.flash_attention = false;  // kiln keeps the (T, T) attention probabilities
  } else {
    const Preset& p = find_preset(o.model);
    model = p.model;
    const JobSpec recipe = p.job();
    job.seq_len = recipe.seq_len;
    job.global_batch_tokens = recipe.global_batch_tokens;
    job.train_tokens = recipe.train_tokens;
  }
  if (g.seq_len->count()) job.seq_len = o.seq_len;
  if (g.batch_tokens->count())
    job.global_batch_tokens =
        int64_t(std::llround(parse_count(o.batch_tokens, "--global-batch-tokens")));
  if (g.tokens->count()) job.train_tokens = parse_count(o.tokens, "--tokens");
  if (g.dtype->count()) job.dtype = parse_dtype(o.dtype);
  if (g.attention->count()) {
    if (o.attention != "flash" && o.attention != "unfused")
      fail("--attention must be flash or unfused, got '{}'", o.attention);
    job.flash_attention = o.attention == "flash";
  }
  // kiln's own trainer runs a --config; a preset is planned on Megatron-LM unless told otherwise.
  job.software = find_software(g.software->count() ? o.software
                               : from_config       ? "kiln"
                                                   : "megatron");
  if (g.grad_reduce->count()) {
    if (o.grad_reduce != "bf16" && o.grad_reduce != "fp16" && o.grad_reduce != "fp32")
      fail(
          "--grad-reduce must be bf16, fp16 or fp32 (the dtype gradients are reduced in), got '{}'",
          o.grad_reduce);
    job.grad_reduce = parse_dtype(o.grad_reduce);
  }
  job.fp8_param_gather = o.fp8_param_gather;
  if (g.cp_comm->count()) job.cp_comm = parse_cp_comm(o.cp_comm);
  if (g.attention_kernel->count()) use_attention_kernel(job, o.attention_kernel);
  job.attention_unpad = o.attention_unpad;
  job.overlap_dp = !o.no_overlap;
  job.mem_allowance = o.mem_allowance;
  job.usd_per_gpu_hour = o.usd;
  job.gpu_power_w = o.gpu_power_w;
  job.node_overhead_w = o.node_overhead_w;
  job.pue = o.pue;
  job.gco2_per_kwh = o.gco2;
  job.failures_per_gpu_hour = o.failures_per_gpu_hour;
  job.restart_minutes = o.restart_minutes;
  job.ckpt_write_gbs = o.ckpt_write_gbs;
  job.storage_gbs = o.storage_gbs;
  job.reserved_usd_per_gpu_hour = o.prices.reserved_usd_per_gpu_hour;
  job.spot_usd_per_gpu_hour = o.prices.spot_usd_per_gpu_hour;
  job.spot_monthly_interruption = o.prices.spot_monthly_interruption;
  job.spot_restart_minutes = o.prices.spot_restart_minutes;
  job.capex_usd_per_gpu = o.prices.capex_usd_per_gpu;
  job.depreciation_years = o.prices.depreciation_years;
  job.utilisation = o.prices.utilisation;
  job.usd_per_kwh = o.prices.usd_per_kwh;
  job.validate();
  model.validate(from_config ? o.config : "--model " + o.model);
  if (model.learned_positions && job.seq_len > model.max_seq)
    fail("--seq-len {} is longer than the {} positions {} has (learned position embeddings)",
         job.seq_len, model.max_seq, model.name);

  ClusterSpec cluster = cluster_from(o, g);
  check_power_under_cap(o, cluster);
  // A CPU trains in fp32 with kiln's unfused attention and kernels unless told otherwise.
  if (cluster.device.cpu && !g.software->count()) job.software = find_software("kiln");
  // A TPU slice runs XLA, not a GPU framework.
  if (cluster.topology == Topology::torus && !g.software->count() && !from_config)
    job.software = find_software("maxtext");
  if (cluster.device.cpu && !g.dtype->count()) job.dtype = Dtype::fp32;
  // A part with no bf16 multipliers (Ascend 910) trains in fp16 with loss scaling.
  if (!cluster.device.bf16 && !g.dtype->count() && job.dtype == Dtype::bf16)
    job.dtype = Dtype::fp16;
  if (cluster.device.cpu && !g.attention->count()) job.flash_attention = false;
  if (const std::string p = software_device_problem(job.software, cluster.device); !p.empty())
    fail("{}", p);
  if (const std::string p = precision_problem(cluster.device, job.dtype); !p.empty()) fail("{}", p);
  if (const std::string p = software_precision_problem(job.software, job.dtype, &cluster.device);
      !p.empty())
    fail("{}", p);
  if (const std::string p = attention_kernel_problem(cluster.device, job); !p.empty())
    fail("{}", p);
  const PlanInputs in{model, cluster, job};

  if (g.days->count()) {
    FixedFields fixed;
    if (!o.layout.empty()) {
      fixed.values = parse_layout(o.layout, &fixed.keys);
      if (fixed.keys.dp)
        fail("--days searches the cluster size, so dp follows from it; leave dp out of --layout");
    }
    return plan_days(o, in, fixed, g.slices->count() > 0 || cluster.slices > 1);
  }

  if (!o.layout.empty()) {
    LayoutKeys keys;
    Layout l = parse_layout(o.layout, &keys);
    // sp defaults to 1 with tp > 1, where the software has it.
    if (!keys.sp && !job.software.sequence_parallel) l.sp = false;
    if (!keys.all()) {
      // A partial layout: the keys given fix a search over the rest.
      SearchResult r = search(model, cluster, job, FixedFields{l, keys});
      if (r.considered > 1) return plan_partial(o, in, keys, l, r);
      if (r.considered == 0) {
        // Nothing can run: the checks of the layout with the defaults filled in name the
        // problem ("tp=3 does not divide the 32 attention heads; tp can be ...").
        complete_layout(model, cluster, job, l, o.layout);
        fail(
            "--layout {}: no layout with these keys can run on {}: the global batch of {} "
            "sequences must split over dp×mb and tp×pp must divide the {} devices",
            o.layout, cluster.describe(), job.global_batch_seqs(), cluster.total_gpus());
      }
      l = r.least_memory.layout;  // the one layout left (one device: tp = pp = vpp = 1, no ZeRO)
    } else {
      l = complete_layout(model, cluster, job, l, o.layout);
    }
    Estimate e = evaluate(model, cluster, job, l);
    if (o.budget > 0 && e.memory.fits()) return plan_budget(o, in, e);
    if (o.budget > 0) {
      const std::vector<std::string> one = layout_fixes(model, cluster, job, l);
      fail("--budget: {} does not fit in memory on {} ({:.1f} of {:.1f} GiB); {}", l.to_string(),
           cluster.describe(), gib(e.memory.total), gib(e.memory.capacity),
           one.empty() ? "the cluster " + fit_advice(model, cluster, job)
                       : "it fits with one change: " + join_names(one));
    }
    std::vector<std::string> fixes;
    std::string advice;
    if (!e.memory.fits()) {
      fixes = layout_fixes(model, cluster, job, l);
      if (fixes.empty()) advice = fit_advice(model, cluster, job);
    }
    if (o.json) {
      nlohmann::json j = inputs_json(in);
      j.update(estimate_json(e, in));
      if (!e.memory.fits()) j["fits_with"] = fixes;
      if (!advice.empty()) j["advice"] = advice;
      fmt::print("{}\n", j.dump(2));
    } else {
      fmt::print("{}{}", inputs_text(in), estimate_text(e, in));
      if (!e.memory.fits()) {
        if (!fixes.empty())
          fmt::print("\nfits with one change: {}\n", join_names(fixes));
        else
          fmt::print("\nno single change makes it fit; the cluster {}\n", advice);
      }
      if (from_config && cluster.device.cpu)
        fmt::print("\nmeasure it: kiln bench train --config {}{}\n", o.config,
                   o.sets.empty() ? "" : " --set ...");
    }
    return;
  }

  SearchResult r = search(model, cluster, job);
  if (r.considered == 0)
    fail(
        "no layout of {} can run {}: the global batch of {} sequences must split over dp = "
        "devices/(tp·pp); change --global-batch-tokens or --nodes",
        cluster.describe(), model.name, job.global_batch_seqs());
  if (r.fitting.empty()) {
    std::string advice = fit_advice(model, cluster, job);
    if (o.json) {
      nlohmann::json j = search_json(r, in, o.top);
      j["advice"] = advice;
      fmt::print("{}\n", j.dump(2));
      return;
    }
    fail("{} fits on no layout of {} ({} layouts tried): it {}", model.name, cluster.describe(),
         r.considered, advice);
  }
  if (o.budget > 0) return plan_budget(o, in, r.fitting.front());
  if (o.json) {
    fmt::print("{}\n", search_json(r, in, o.top).dump(2));
    return;
  }
  fmt::print("{}{}", inputs_text(in), search_table(r, o.top));
  fmt::print("\nthe best layout in detail:\n{}", estimate_text(r.fitting.front(), in));
}

}  // namespace

void register_plan(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plan",
      "Plan a training run on a cluster: memory, step time, the best parallel layout, days, "
      "GPU-hours, cost, energy and CO2 (docs/planner.md)");
  auto o = std::make_shared<PlanOpts>();
  auto g = std::make_shared<Given>();
  const char* M = "Model";
  const char* H = "Hardware";
  const char* J = "Job";
  const char* L = "Layout";
  const char* C = "Calibration";
  cmd->add_option("--config", o->config, "a kiln config: the model, batch and steps it trains")
      ->group(M);
  cmd->add_option("--set", o->sets, "override a config key: section.key=value (repeatable)")
      ->group(M);
  cmd->add_option("--model", o->model, "a published architecture (see --list-models)")->group(M);
  cmd->add_flag("--list-models", o->list_models, "list the model presets and exit")->group(M);
  cmd->add_option("--gpu", o->gpu, "a device from the catalog (see --list-gpus)")->group(H);
  cmd->add_option("--hardware", o->hardware,
                  "a hardware TOML file (custom hardware, or --calibrate's output)")
      ->group(H);
  cmd->add_flag("--list-gpus", o->list_gpus, "list the device catalog and exit")->group(H);
  g->nodes = cmd->add_option("--nodes", o->nodes, "nodes (default 1)")->group(H);
  g->gpus =
      cmd->add_option("--gpus", o->gpus, "devices in the cluster, whole nodes (instead of --nodes)")
          ->group(H);
  g->gpus_per_node = cmd->add_option("--gpus-per-node", o->gpus_per_node,
                                     "devices per node (default: the device's usual server)")
                         ->group(H);
  g->intra_link = cmd->add_option("--intra-link", o->intra_link,
                                  "link inside a node: nvlink, xgmi, xgmi-mesh, hccs, pcie or shm")
                      ->group(H);
  g->intra_link_gbs = cmd->add_option("--intra-link-gbs", o->intra_link_gbs,
                                      "its bandwidth per device and direction, GB/s")
                          ->group(H);
  g->network = cmd->add_option("--network", o->network,
                               "between nodes: ib-hdr, ib-ndr, roce, slingshot or ethernet")
                   ->group(H);
  g->nics_per_node =
      cmd->add_option("--nics-per-node", o->nics_per_node, "NICs per node")->group(H);
  g->nic_gbps = cmd->add_option("--nic-gbps", o->nic_gbps, "bandwidth per NIC, Gb/s")->group(H);
  g->topology = cmd->add_option("--topology", o->topology,
                                "fat-tree (non-blocking), spine-leaf, dragonfly or ring")
                    ->group(H);
  g->oversubscription = cmd->add_option("--oversubscription", o->oversubscription,
                                        "spine-leaf: down:up bandwidth of a leaf (e.g. 3 for "
                                        "3:1); dragonfly: taper of the global links")
                            ->group(H);
  g->nodes_per_domain = cmd->add_option("--nodes-per-domain", o->nodes_per_domain,
                                        "nodes under one leaf (spine-leaf) or in one group "
                                        "(dragonfly); default 32")
                            ->group(H);
  g->slices = cmd->add_option("--slices", o->slices,
                              "TPU: slices of the same size joined over the hosts' data-centre "
                              "network (multi-slice); default 1")
                  ->group(H);
  g->rank_order = cmd->add_option("--rank-order", o->rank_order,
                                  "placement, innermost first: tp-dp-pp (Megatron-LM) or "
                                  "tp-pp-dp (Llama 3, torchtitan)")
                      ->group(H);
  g->power_cap = cmd->add_option("--power-cap-w", o->power_cap_w,
                                 "each device's board power limit, W (nvidia-smi -pl): its "
                                 "throughput as measured at that limit (H100 SXM: 200-700 W)")
                     ->group(H);
  g->seq_len = cmd->add_option("--seq-len", o->seq_len, "tokens per sequence")->group(J);
  g->batch_tokens = cmd->add_option("--global-batch-tokens", o->batch_tokens,
                                    "tokens per optimizer step (e.g. 4Mi, 3.1M)")
                        ->group(J);
  g->tokens =
      cmd->add_option("--tokens", o->tokens, "training tokens (e.g. 2T, 300B, 1.5e12)")->group(J);
  g->dtype = cmd->add_option(
                    "--dtype", o->dtype,
                    "bf16 or fp16 (mixed precision with fp32 master weights), fp8 (linear layers' "
                    "matmuls in fp8, the rest bf16) or fp32")
                 ->group(J);
  g->attention =
      cmd->add_option("--attention", o->attention, "flash (no score matrix kept) or unfused")
          ->group(J);
  g->software = cmd->add_option("--software", o->software,
                                "what runs the job: megatron (default), megatron-2021, nemo, "
                                "deepspeed, deepspeed-2021, fsdp, "
                                "fsdp-compile, torchtitan, torchtitan-compile, maxtext (default on "
                                "a TPU), kiln (default with --config); see --list-software")
                    ->group(J);
  cmd->add_flag("--list-software", o->list_software, "list the software profiles and exit")
      ->group(J);
  g->grad_reduce = cmd->add_option("--grad-reduce", o->grad_reduce,
                                   "bf16, fp16 or fp32: the dtype gradients are kept and reduced "
                                   "in over data parallelism (FSDP's reduce_dtype); default: the "
                                   "software profile's")
                       ->group(J);
  g->fp8_param_gather =
      cmd->add_flag(
             "--fp8-param-gather", o->fp8_param_gather,
             "with --dtype fp8, ZeRO gathers the fp8 weights (1 byte per parameter): "
             "Megatron-Core's --fp8-param-gather, torchtitan's enable_fsdp_float8_all_gather")
          ->group(J);
  g->attention_kernel =
      cmd->add_option("--attention-kernel", o->attention_kernel,
                      "flash2, flash1, xformers or openai-triton: the attention kernel whose "
                      "published benchmark sets flash attention's rate (default: the software "
                      "profile's)")
          ->group(J);
  g->attention_unpad =
      cmd->add_flag("--attention-unpad", o->attention_unpad,
                    "the model unpads q, k, v for a variable-length flash kernel and pads the "
                    "output back every layer (flash-attn's bert_padding, as llm-foundry's "
                    "attn_impl: flash runs it)")
          ->group(J);
  g->cp_comm = cmd->add_option("--cp-comm", o->cp_comm,
                               "ring (default: key/value passes overlapping attention, "
                               "Megatron-Core's --cp-comm-type p2p) or all-gather (exposed, "
                               "--cp-comm-type allgather, as Llama 3 trained)")
                   ->group(J);
  cmd->add_flag("--no-overlap", o->no_overlap,
                "data-parallel collectives run after backward instead of during it")
      ->group(J);
  cmd->add_option("--mem-allowance", o->mem_allowance,
                  "fraction added to counted memory for fragmentation and uncounted buffers")
      ->capture_default_str()
      ->group(J);
  cmd->add_option("--usd-per-gpu-hour", o->usd, "price of one device-hour, US dollars")->group(J);
  cmd->add_option("--gpu-power-w", o->gpu_power_w,
                  "average power per device, W (default: its TDP, or --power-cap-w)")
      ->group(J);
  cmd->add_option("--node-overhead-w", o->node_overhead_w,
                  "power of the rest of a node, W (default: the catalog's server figure)")
      ->group(J);
  cmd->add_option("--pue", o->pue, "data-centre power usage effectiveness")
      ->capture_default_str()
      ->group(J);
  cmd->add_option("--gco2-per-kwh", o->gco2, "grid carbon intensity, g CO2 per kWh")
      ->capture_default_str()
      ->group(J);
  cmd->add_option(
         "--failures-per-gpu-hour", o->failures_per_gpu_hour,
         "interruptions per device-hour (default: Llama 3's 419 in 54 days on 16,384 GPUs)")
      ->group(J);
  cmd->add_option("--restart-minutes", o->restart_minutes,
                  "time from a failure to training again (detect, reschedule, load)")
      ->capture_default_str()
      ->group(J);
  cmd->add_option("--ckpt-write-gbs", o->ckpt_write_gbs,
                  "checkpoint write bandwidth per node, GB/s (default: one NIC's line rate)")
      ->group(J);
  cmd->add_option("--storage-gbs", o->storage_gbs,
                  "the checkpoint storage's aggregate write bandwidth, GB/s (default: Llama 3's "
                  "Tectonic, sustained)")
      ->capture_default_str()
      ->group(J);
  cmd->add_option("--reserved-usd-per-gpu-hour", o->prices.reserved_usd_per_gpu_hour,
                  "a reserved (committed) price per device-hour, to compare")
      ->group(J);
  cmd->add_option("--spot-usd-per-gpu-hour", o->prices.spot_usd_per_gpu_hour,
                  "a spot (pre-emptible) price per device-hour: the run priced with pre-emptions")
      ->group(J);
  cmd->add_option("--spot-monthly-interruption", o->prices.spot_monthly_interruption,
                  "share of spot nodes the provider reclaims in a month (AWS's frequency of "
                  "interruption; 0.05 is the edge of its lowest band)")
      ->capture_default_str()
      ->group(J);
  cmd->add_option("--spot-restart-minutes", o->prices.spot_restart_minutes,
                  "time from a pre-emption to training again (default: --restart-minutes)")
      ->group(J);
  cmd->add_option("--capex-usd-per-gpu", o->prices.capex_usd_per_gpu,
                  "owned hardware: capital per device (its server share, network, installation)")
      ->group(J);
  cmd->add_option("--depreciation-years", o->prices.depreciation_years,
                  "owned hardware: years its capital is spread over")
      ->capture_default_str()
      ->group(J);
  cmd->add_option("--utilisation", o->prices.utilisation,
                  "owned hardware: share of those years it runs jobs, in (0, 1]")
      ->capture_default_str()
      ->group(J);
  cmd->add_option("--usd-per-kwh", o->prices.usd_per_kwh,
                  "electricity price, US dollars per kWh (the run's energy cost; owned hardware)")
      ->group(J);
  cmd->add_option("--layout", o->layout,
                  "evaluate one layout, e.g. tp=8,pp=16,dp=8,mb=1,zero=1,recompute=attention "
                  "(also vpp=N, sp=0|1, cp=N, asynctp=1, shard=N for hybrid sharding: ZeRO "
                  "over groups of N data-parallel ranks); without it every layout is searched")
      ->group(L);
  g->days = cmd->add_option("--days", o->days,
                            "find the smallest cluster (whole nodes) that trains the model in "
                            "this many days, and its layout")
                ->group(L);
  g->budget = cmd->add_option("--budget", o->budget,
                              "US dollars to spend: the steps, tokens and days they buy (needs "
                              "--usd-per-gpu-hour)")
                  ->group(L);
  cmd->add_option("--top", o->top, "layouts to list from a search")
      ->capture_default_str()
      ->group(L);
  cmd->add_flag("--json", o->json, "print JSON (units in the key names) instead of tables")
      ->group(L);
  cmd->add_flag("--calibrate", o->calibrate,
                "measure this machine (matmul rates, memory bandwidth, kiln's kernels) and write a "
                "hardware file")
      ->group(C);
  cmd->add_option("--output", o->output, "where --calibrate writes (- prints it)")
      ->capture_default_str()
      ->group(C);
  cmd->add_option("--seconds", o->seconds, "seconds per --calibrate measurement")
      ->capture_default_str()
      ->group(C);
  cmd->add_option("--rounds", o->rounds,
                  "--calibrate measures everything this many times and keeps the best")
      ->capture_default_str()
      ->group(C);
  cmd->add_option("--threads", o->threads, "threads for --calibrate (0 = all cores)")
      ->capture_default_str()
      ->group(C);
  cmd->callback([o, g, cmd]() {
    o->given.clear();
    o->hardware_flags.clear();
    for (const CLI::Option* opt : cmd->get_options()) {
      if (opt->count() > 0) o->given.push_back(opt->get_name());
      if (opt->get_group() == "Hardware") o->hardware_flags.push_back(opt->get_name());
    }
    // A --layout given empty (or only commas) is refused, not read as "search everything".
    if (o->flag_given("--layout")) (void)parse_layout(o->layout, nullptr);
    // Every number a flag takes must be finite: NaN passes any range check (each comparison is
    // false), and infinity turns the arithmetic into nonsense.
    for (const CLI::Option* opt : cmd->get_options()) {
      if (opt->get_type_name() != "FLOAT") continue;
      for (const std::string& s : opt->results()) {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (end != s.c_str() && *end == '\0' && !std::isfinite(v))
          fail("{} must be a finite number, got {}", opt->get_name(), s);
      }
    }
    // Flags whose default stands for "not given" (the device's own figure) take, when given, a
    // value of their own.
    const struct {
      const char* flag;
      bool strict;  // more than 0, or at least 0
    } own[] = {
        {"--gpu-power-w", true}, {"--node-overhead-w", false}, {"--spot-restart-minutes", false}};
    for (const auto& f : own) {
      const CLI::Option* opt = cmd->get_option(f.flag);
      if (opt->count() == 0) continue;
      const double v = opt->as<double>();
      if (f.strict ? !(v > 0) : !(v >= 0))
        fail("{} must be {} 0, got {:g} (leave the flag out for the default)", f.flag,
             f.strict ? "more than" : "at least", v);
    }
    if (o->calibrate)
      plan_calibrate(o->threads, o->seconds, o->rounds, o->output, o->json);
    else
      plan(*o, *g);
  });
}

}  // namespace kiln::cli
