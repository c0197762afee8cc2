#include "plan/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "plan/economics.h"
#include "plan/goodput.h"

namespace kiln::plan {
namespace {

double gib(double bytes) {
  return bytes / double(1 << 30);
}

std::string with_commas(double v) {
  std::string digits = fmt::format("{:.0f}", std::fabs(v));
  std::string out;
  for (size_t i = 0; i < digits.size(); i++) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  if (v < 0) out.insert(out.begin(), '-');
  return out;
}

}  // namespace

std::string amount(double v) {
  if (std::fabs(v) >= 1000) return with_commas(v);
  if (v == 0) return "0";
  return fmt::format("{:.4g}", v);
}

std::string si(double v) {
  const char* units[] = {"", "K", "M", "B", "T", "P", "E"};
  if (std::fabs(v) >= 1e21) return fmt::format("{:.3g}", v);  // beyond the units: plain
  int u = 0;
  while (std::fabs(v) >= 1000 && u < 6) v /= 1000, u++;
  std::string s = fmt::format("{:.3g}", v);
  return s + units[u];
}

nlohmann::json inputs_json(const PlanInputs& in) {
  const ModelSpec& m = in.model;
  const ClusterSpec& c = in.cluster;
  const JobSpec& j = in.job;
  const ParamCounts pc = count_params(m);
  nlohmann::json model = {{"name", m.name},
                          {"params", pc.total},
                          {"n_layer", m.n_layer},
                          {"hidden", m.hidden},
                          {"n_head", m.n_head},
                          {"n_kv_head", m.n_kv_head},
                          {"ffn_hidden", m.ffn_hidden},
                          {"vocab", m.vocab},
                          {"ffn", m.ffn == FfnKind::swiglu ? "swiglu" : "gelu"},
                          {"model_flops_per_token", model_flops_per_token(m, j.seq_len)}};
  nlohmann::json cluster = {{"device", c.device.name},
                            {"devices", c.total_gpus()},
                            {"nodes", c.nodes},
                            {"gpus_per_node", c.gpus_per_node},
                            {"peak_tflops", c.device.peak_tflops(j.dtype)},
                            {"memory_gib", c.device.memory_gib},
                            {"matmul_efficiency", c.device.matmul_efficiency},
                            {"sustained", c.device.sustained},
                            {"intra_link", c.intra_link},
                            {"intra_link_gbs", c.intra_link_gbs},
                            {"network", c.network},
                            {"nics_per_node", c.nics_per_node},
                            {"nic_gbps", c.nic_gbps},
                            {"topology", topology_name(c.topology)},
                            {"oversubscription", c.oversubscription},
                            {"nodes_per_domain", c.nodes_per_domain},
                            {"rank_order", rank_order_name(c.order)}};
  if (c.device.power_cap_w > 0) cluster["power_cap_w"] = c.device.power_cap_w;
  if (c.topology == Topology::torus) {
    const TorusShape t = c.torus();
    cluster["torus"] = {{"slice", t.name()}, {"wraparound", t.wrap[0]}, {"slices", c.slices}};
  }
  nlohmann::json job = {
      {"seq_len", j.seq_len},
      {"global_batch_tokens", j.global_batch_tokens},
      {"train_tokens", j.train_tokens},
      {"dtype", dtype_name(j.dtype)},
      {"software", j.software.name},
      {"grad_reduce", j.grad_reduce_name()},
      {"fp8_param_gather", j.fp8_param_gather},
      {"cp_comm", cp_comm_name(j.cp_comm)},
      {"attention_kernel", j.attention_kernel.empty() ? "profile" : j.attention_kernel},
      {"attention_unpad", j.attention_unpad},
      {"attention", j.flash_attention ? "flash" : "unfused"},
      {"overlap_dp", j.overlap_dp},
      {"mem_allowance", j.mem_allowance},
      {"usd_per_gpu_hour", j.usd_per_gpu_hour},
      {"gpu_power_w", j.gpu_power_w > 0 ? j.gpu_power_w : c.device.tdp_w},
      {"node_overhead_w", j.node_overhead_w >= 0 ? j.node_overhead_w : c.device.node_overhead_w},
      {"pue", j.pue},
      {"gco2_per_kwh", j.gco2_per_kwh}};
  return {{"model", model}, {"cluster", cluster}, {"job", job}};
}

nlohmann::json estimate_json(const Estimate& e, const PlanInputs& in) {
  const Layout& l = e.layout;
  nlohmann::json j = {{"layout",
                       {{"text", l.to_string()},
                        {"tp", l.tp},
                        {"cp", l.cp},
                        {"pp", l.pp},
                        {"dp", l.dp},
                        {"mb", l.mb},
                        {"vpp", l.vpp},
                        {"zero", l.zero},
                        {"recompute", l.recompute_text()},
                        {"sp", l.sp},
                        {"asynctp", l.async_tp}}}};
  if (!e.valid()) {
    j["invalid"] = e.invalid;
    return j;
  }
  const MemoryBreakdown& m = e.memory;
  const TimeBreakdown& t = e.time;
  j["micro_batches"] = e.micro_batches;
  j["fits"] = m.fits();
  j["memory_per_gpu_gib"] = gib(m.total);
  j["memory_capacity_gib"] = gib(m.capacity);
  j["memory_gib"] = {{"stage", m.stage},
                     {"weights", gib(m.weights)},
                     {"grads", gib(m.grads)},
                     {"optimizer", gib(m.optimizer)},
                     {"activations", gib(m.activations)},
                     {"transient", gib(m.transient)},
                     {"allowance", gib(m.allowance)},
                     {"reserved", gib(m.reserved)}};
  j["step_time_s"] = t.step;
  j["time_s"] = {{"critical_stage", t.critical_stage},
                 {"compute", t.compute},
                 {"recompute", t.recompute},
                 {"tp_comm", t.tp_comm},
                 {"cp_comm", t.cp_comm},
                 {"pp_p2p", t.pp_p2p},
                 {"pp_bubble", t.bubble},
                 {"zero_exposed", t.zero_exposed},
                 {"dp_comm_total", t.dp_comm},
                 {"dp_exposed", t.dp_exposed},
                 {"overlap_contention", t.contention},
                 {"optimizer", t.optimizer}};
  const int N = in.cluster.total_gpus();
  j["tokens_per_step"] = e.tokens_per_step;
  j["tokens_per_s"] = e.tokens_per_s;
  j["tokens_per_s_per_gpu"] = e.tokens_per_s / N;
  j["tflops_per_gpu_model"] = e.tflops_per_gpu_model;
  j["tflops_per_gpu_hw"] = e.tflops_per_gpu_hw;
  j["mfu"] = e.mfu;
  j["hfu"] = e.hfu;
  j["steps"] = e.steps;
  j["tokens_trained"] = double(e.steps) * e.tokens_per_step;  // at least the budget
  j["days"] = e.days;
  j["gpu_hours"] = e.gpu_hours;
  j["cost_usd"] = in.job.usd_per_gpu_hour > 0 ? nlohmann::json(e.cost_usd) : nlohmann::json();
  j["energy_kwh"] = e.energy_kwh;
  j["co2_t"] = e.co2_t;
  const RunGoodput rg = run_goodput(in.model, in.cluster, in.job, e, /*refuse_stalled=*/false);
  auto finite = [&](double v) { return rg.g.stalled() ? nlohmann::json() : nlohmann::json(v); };
  j["with_failures"] = {{"stalled", rg.g.stalled()},
                        {"failures_per_gpu_hour", in.job.failures_per_gpu_hour},
                        {"restart_minutes", in.job.restart_minutes},
                        {"checkpoint_bytes", rg.checkpoint_bytes},
                        {"checkpoint_write_gbs", rg.write_gbs},
                        {"checkpoint_seconds", rg.checkpoint_seconds},
                        {"mtbf_hours", rg.g.mtbf_hours},
                        {"checkpoint_interval_hours", rg.g.interval_hours},
                        {"expected_interruptions", finite(rg.g.expected_failures)},
                        {"days", finite(rg.g.wall_hours / 24.0)},
                        {"gpu_hours", finite(rg.g.wall_hours * N)},
                        {"cost_usd", in.job.usd_per_gpu_hour > 0
                                         ? finite(rg.g.wall_hours * N * in.job.usd_per_gpu_hour)
                                         : nlohmann::json()},
                        {"goodput", rg.g.goodput}};
  const PowerDraw pw = power_draw(in.cluster, in.job);
  j["power_kw"] = {{"it", pw.it_kw}, {"facility", pw.facility_kw}, {"overhead", pw.overhead_kw}};
  j["electricity_usd"] =
      in.job.usd_per_kwh > 0 ? nlohmann::json(electricity_usd(in.job, e)) : nlohmann::json();
  j["cost_options"] = nlohmann::json::array();
  for (const CostOption& c : cost_options(in.model, in.cluster, in.job, e))
    j["cost_options"].push_back(
        {{"name", c.name},
         {"usd_per_gpu_hour", c.usd_per_gpu_hour},
         {"interruptions_per_gpu_hour", c.interruptions_per_gpu_hour},
         {"stalled", c.stalled},
         {"days", c.stalled ? nlohmann::json() : nlohmann::json(c.days)},
         {"gpu_hours", c.stalled ? nlohmann::json() : nlohmann::json(c.gpu_hours)},
         {"cost_usd", c.stalled ? nlohmann::json() : nlohmann::json(c.usd)},
         {"goodput", c.goodput}});
  j["limiter"] = limiter(e);
  j["notes"] = e.notes;
  return j;
}

std::string inputs_text(const PlanInputs& in) {
  const ModelSpec& m = in.model;
  const JobSpec& j = in.job;
  const ParamCounts pc = count_params(m);
  std::string s = fmt::format(
      "model    {} ({} parameters: {} layers, hidden {}, {} heads{}, MLP {} {}, vocabulary {})\n",
      m.name, si(double(pc.total)), m.n_layer, m.hidden, m.n_head,
      (m.head_size > 0 ? fmt::format(" of {}", m.head_size) : std::string()) +
          (m.n_kv_head != m.n_head ? fmt::format(" / {} key-value", m.n_kv_head) : ""),
      m.ffn == FfnKind::swiglu ? "SwiGLU" : "GELU", m.ffn_hidden, m.vocab);
  s += fmt::format("cluster  {}\n", in.cluster.describe());
  s += fmt::format(
      "job      seq {}, batch {} × {} = {} tokens, {} tokens ({} step{}), {}, {} attention, "
      "software {}{}{}{}{}{}\n",
      j.seq_len, j.global_batch_seqs(), j.seq_len, si(double(j.global_batch_tokens)),
      si(j.train_tokens), with_commas(double(j.steps())), j.steps() == 1 ? "" : "s",
      dtype_name(j.dtype), j.flash_attention ? "flash" : "unfused", j.software.name,
      j.grad_reduce ? ", gradients reduced in " + j.grad_reduce_name() : "",
      j.fp8_param_gather ? ", weights gathered in fp8" : "",
      j.cp_comm == JobSpec::CpComm::all_gather ? ", context parallelism by all-gather" : "",
      j.attention_kernel.empty() ? "" : ", attention kernel " + j.attention_kernel,
      j.attention_unpad ? ", attention inputs unpadded" : "");
  return s;
}

std::string estimate_text(const Estimate& e, const PlanInputs& in) {
  const Layout& l = e.layout;
  if (!e.valid()) return fmt::format("layout {}: {}\n", l.to_string(), e.invalid);
  const MemoryBreakdown& m = e.memory;
  const TimeBreakdown& t = e.time;
  const JobSpec& j = in.job;
  const int N = in.cluster.total_gpus();
  std::string s =
      fmt::format("\nlayout   {}  ({} micro-batch{} of {} per pipeline and step)\n", l.to_string(),
                  e.micro_batches, e.micro_batches == 1 ? "" : "es", l.mb);
  s += fmt::format("\n{:<44} {:>9}\n", fmt::format("memory per GPU (stage {})", m.stage), "GiB");
  auto mem_row = [&](const std::string& what, double bytes) {
    s += fmt::format("  {:<42} {:>9.2f}\n", what, gib(bytes));
  };
  mem_row("weights", m.weights);
  mem_row("gradients", m.grads);
  // The stage the software runs (DeepSpeed's BF16_Optimizer shards at zero=0, torchtitan's
  // ZeRO-2/3 under pp holds ZeRO-1's state).
  const int zr = j.software.zero_as_run(l, j.dtype);
  mem_row(zr > 0 && l.replicas() > 1
              ? fmt::format("optimizer state (ZeRO-{} over shard={})", zr, l.zero_group())
          : zr > 0 ? fmt::format("optimizer state (ZeRO-{} over {}={})", zr,
                                 l.cp > 1 ? "dp×cp" : "dp", l.dp_cp())
                   : std::string("optimizer state"),
          m.optimizer);
  mem_row(fmt::format("activations (recompute {})", l.recompute_text()), m.activations);
  mem_row(j.software.zero_as_run(l, j.dtype) >= 3 ? "backward working set, ZeRO-3 gathers"
                                                  : "backward working set",
          m.transient);
  mem_row(fmt::format("allowance ({:.0f}% of the above)", 100 * j.mem_allowance), m.allowance);
  mem_row("reserved (runtime, libraries)", m.reserved);
  s += fmt::format(
      "  {:<42} {:>9.2f} of {:.1f}: {}\n", "total", gib(m.total), gib(m.capacity),
      m.fits() ? "fits" : fmt::format("OUT OF MEMORY by {:.1f} GiB", gib(m.total - m.capacity)));

  s +=
      fmt::format("\n{:<44} {:>9} {:>6}\n",
                  fmt::format("time per step (slowest stage: {})", t.critical_stage), "s", "share");
  auto time_row = [&](const std::string& what, double sec) {
    s += fmt::format("  {:<42} {:>9.4g} {:>5.1f}%\n", what, sec, 100 * sec / t.step);
  };
  time_row("compute", t.compute);
  if (t.recompute > 0) time_row("  of which recompute", t.recompute);
  if (l.tp > 1) time_row("tensor-parallel collectives", t.tp_comm);
  if (l.cp > 1)
    time_row(in.job.cp_comm == JobSpec::CpComm::all_gather
                 ? "context-parallel key/value all-gathers (exposed)"
                 : "context-parallel key/value passes (exposed)",
             t.cp_comm);
  if (l.pp > 1) {
    time_row(in.model.tied_embeddings ? "pipeline sends, tied embedding's gradient sum"
                                      : "pipeline sends",
             t.pp_p2p);
    time_row(fmt::format("pipeline bubble ((p-1)/v of a stage's m)"), t.bubble);
  }
  if (l.zero >= 2 && l.dp > 1) time_row("ZeRO per-micro-batch traffic (exposed)", t.zero_exposed);
  if (l.dp > 1 && t.dp_comm > 0)  // ZeRO-3 and FSDP's ZeRO-2 have no once-per-step traffic
    time_row(fmt::format("data-parallel traffic (exposed of {:.3g} s)", t.dp_comm), t.dp_exposed);
  if (t.contention > 0) time_row("compute slowed beside hidden collectives", t.contention);
  time_row("optimizer", t.optimizer);
  s += fmt::format("  {:<42} {:>9.4g}\n", "step", t.step);

  s += "\nthroughput\n";
  s += fmt::format("  {:<42} {:>12}  ({} per GPU)\n", "tokens/s", si(e.tokens_per_s),
                   si(e.tokens_per_s / N));
  s += fmt::format("  {:<42} {:>12}  MFU {:.1f}%\n", "model TFLOP/s per GPU",
                   amount(e.tflops_per_gpu_model), 100 * e.mfu);
  s += fmt::format("  {:<42} {:>12}  HFU {:.1f}% (counts recomputation)\n",
                   "hardware TFLOP/s per GPU", amount(e.tflops_per_gpu_hw), 100 * e.hfu);
  s += "\nrun\n";
  s += fmt::format("  {:<42} {:>12}\n", "steps", with_commas(double(e.steps)));
  s += fmt::format("  {:<42} {:>12}\n", "days", amount(e.days));
  s += fmt::format("  {:<42} {:>12}\n", "GPU-hours", amount(e.gpu_hours));
  if (j.usd_per_gpu_hour > 0)
    s += fmt::format("  {:<42} {:>12}\n", fmt::format("cost at ${:g}/GPU-hour", j.usd_per_gpu_hour),
                     fmt::format("${}", amount(e.cost_usd)));
  else
    s += fmt::format("  {:<42} {:>12}\n", "cost", "(give --usd-per-gpu-hour)");
  s += fmt::format("  {:<42} {:>12}\n", fmt::format("energy, kWh (PUE {:g})", j.pue),
                   amount(e.energy_kwh));
  s += fmt::format("  {:<42} {:>12}\n", fmt::format("CO2, tonnes ({:g} g/kWh)", j.gco2_per_kwh),
                   amount(e.co2_t));
  const RunGoodput rg = run_goodput(in.model, in.cluster, j, e, /*refuse_stalled=*/false);
  const Goodput& g = rg.g;
  s += fmt::format("\nwith failures ({:.3g} per GPU-hour, restart {:g} min, checkpoint {:.4g} s)\n",
                   j.failures_per_gpu_hour, j.restart_minutes, rg.checkpoint_seconds);
  s += fmt::format("  {:<42} {:>12}\n", "job MTBF, hours", amount(g.mtbf_hours));
  if (g.stalled())
    s += fmt::format("  does not finish: {}\n", stalled_reason(rg.in));
  else {
    s += fmt::format("  {:<42} {:>12}\n", "checkpoint every (hours of training)",
                     amount(g.interval_hours));
    s += fmt::format("  {:<42} {:>12}\n", "expected interruptions", amount(g.expected_failures));
    s += fmt::format("  {:<42} {:>12}\n", "days", amount(g.wall_hours / 24.0));
    s += fmt::format("  {:<42} {:>12}\n", "GPU-hours", amount(g.wall_hours * N));
    if (j.usd_per_gpu_hour > 0)
      s += fmt::format("  {:<42} {:>12}\n", "cost",
                       fmt::format("${}", amount(g.wall_hours * N * j.usd_per_gpu_hour)));
    s += fmt::format("  {:<42} {:>11.1f}%\n", "goodput (useful / all time)", 100 * g.goodput);
  }
  const PowerDraw pw = power_draw(in.cluster, j);
  s += fmt::format("\npower\n  {:<42} {:>12}\n", "IT load, kW (devices and servers)",
                   amount(pw.it_kw));
  s += fmt::format("  {:<42} {:>12}\n", fmt::format("facility, kW (PUE {:g})", j.pue),
                   amount(pw.facility_kw));
  s += fmt::format("  {:<42} {:>12}\n", "cooling and conversion, kW", amount(pw.overhead_kw));
  if (j.usd_per_kwh > 0)
    s += fmt::format("  {:<42} {:>12}\n",
                     fmt::format("electricity at ${:g}/kWh (failure-free)", j.usd_per_kwh),
                     fmt::format("${}", amount(electricity_usd(j, e))));
  const std::vector<CostOption> options = cost_options(in.model, in.cluster, j, e);
  if (!options.empty()) {
    s += fmt::format("\ncost by how the devices are paid for (with failures)\n");
    s += fmt::format("  {:<10} {:>10} {:>12} {:>9} {:>14} {:>16} {:>8}\n", "", "$/GPU-h",
                     "interrupts/h", "days", "GPU-hours", "cost", "goodput");
    for (const CostOption& c : options)
      s += c.stalled ? fmt::format("  {:<10} {:>10.4g} {:>12.3g} {:>9} {:>14} {:>16} {:>7.1f}%\n",
                                   c.name, c.usd_per_gpu_hour, c.interruptions_per_gpu_hour * N,
                                   "never", "–", "–", 100 * c.goodput)
                     : fmt::format("  {:<10} {:>10.4g} {:>12.3g} {:>9} {:>14} {:>16} {:>7.1f}%\n",
                                   c.name, c.usd_per_gpu_hour, c.interruptions_per_gpu_hour * N,
                                   amount(c.days), amount(c.gpu_hours),
                                   fmt::format("${}", amount(c.usd)), 100 * c.goodput);
    if (std::any_of(options.begin(), options.end(), [](const CostOption& c) { return c.stalled; }))
      s += fmt::format(
          "  (never: under {:g}% of the time would train; pre-emptions and failures come faster "
          "than the job restarts)\n",
          100 * kMinGoodput);
  }
  for (const auto& n : e.notes) s += fmt::format("note: {}\n", n);
  return s;
}

nlohmann::json search_fields_json(const SearchResult& r) {
  auto list = [](const std::vector<SearchField>& v) {
    nlohmann::json a = nlohmann::json::object();
    for (const SearchField& f : v) a[f.key] = f.how;
    return a;
  };
  return {{"searched", list(r.searched)},
          {"fixed", list(r.fixed)},
          {"not_searched", list(r.not_searched)}};
}

namespace {
// A step time to the 3 significant digits the search ranks by, in plain notation (1230, 4.53,
// 0.00453).
std::string ranked_step(double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds)) return fmt::format("{:g}", seconds);
  const double ranked = ranked_step_seconds(seconds);  // 9.996 ranks as 10.0, printed "10.0"
  const int exponent = int(std::floor(std::log10(ranked)));
  return fmt::format("{:.{}f}", ranked, std::max(0, 2 - exponent));
}
}  // namespace

std::string search_table(const SearchResult& r, int top) {
  std::string s =
      fmt::format("\nsearched {} layouts, {} fit in memory\n", r.considered, r.fitting.size());
  // One row per layout apart from its ZeRO stage: the faster (or, as fast, the lower) one.
  std::vector<const Estimate*> shown;
  for (const Estimate& e : r.fitting) {
    if (int(shown.size()) == top) break;
    if (std::any_of(shown.begin(), shown.end(),
                    [&](const Estimate* k) { return same_but_zero(k->layout, e.layout); }))
      continue;
    shown.push_back(&e);
  }
  const int n_oom = std::min<int>(3, int(r.faster_oom.size()));
  // The layout column is as wide as its longest entry (cp and asynctp make them long).
  size_t w = 52;
  for (const Estimate* e : shown) w = std::max(w, e->layout.to_string().size());
  for (int i = 0; i < n_oom; i++) w = std::max(w, r.faster_oom[i].layout.to_string().size());
  // Which fields the search varied, which the layout fixed and which were left at one value.
  auto fields = [](const std::vector<SearchField>& v, const char* open, const char* close) {
    std::string t;
    for (size_t i = 0; i < v.size(); i++)
      t += fmt::format("{}{}{}{}{}", i ? "; " : "", v[i].key, open, v[i].how, close);
    return t;
  };
  if (!r.searched.empty()) s += "searched: " + fields(r.searched, " (", ")") + "\n";
  if (!r.fixed.empty()) s += "fixed by --layout: " + fields(r.fixed, "=", "") + "\n";
  if (!r.not_searched.empty()) s += "not searched: " + fields(r.not_searched, "=", "") + "\n";
  s += "\n";
  s += fmt::format("{:>3}  {:<{}} {:>9} {:>9} {:>8} {:>6} {:>8}  {}\n", "#", "layout", w, "step s",
                   "tok/s", "TFLOP/s", "MFU", "mem GiB", "why");
  const double best = r.fitting.empty() ? 0 : r.fitting.front().time.step;
  for (size_t i = 0; i < shown.size(); i++) {
    const Estimate& e = *shown[i];
    std::string why = limiter(e);
    if (i > 0) {
      const double slower = std::max(0.0, 100 * (e.time.step / best - 1));  // ranks round steps
      why = fmt::format("+{:.1f}% step; {}", slower, why);
    }
    // The step to the 3 significant digits the search ranks by (equal ones rank the lower ZeRO
    // stage, then the smaller memory, first), so the column reads in order.
    s += fmt::format("{:>3}  {:<{}} {:>9} {:>9} {:>8.4g} {:>5.1f}% {:>8.1f}  {}\n", i + 1,
                     e.layout.to_string(), w, ranked_step(e.time.step), si(e.tokens_per_s),
                     e.tflops_per_gpu_model, 100 * e.mfu, gib(e.memory.total), why);
  }
  if (n_oom > 0) {
    s += "\nfaster, but out of memory:\n";
    for (int i = 0; i < n_oom; i++) {
      const Estimate& e = r.faster_oom[i];
      s += fmt::format(
          "{:>3}  {:<{}} {:>9} {:>9} {:>8.4g} {:>5.1f}% {:>8.1f}  needs {:.1f} of "
          "{:.1f} GiB (+{:.1f})\n",
          "-", e.layout.to_string(), w, ranked_step(e.time.step), si(e.tokens_per_s),
          e.tflops_per_gpu_model, 100 * e.mfu, gib(e.memory.total), gib(e.memory.total),
          gib(e.memory.capacity), gib(e.memory.total - e.memory.capacity));
    }
  }
  return s;
}

nlohmann::json search_json(const SearchResult& r, const PlanInputs& in, int top) {
  nlohmann::json j = inputs_json(in);
  j["layouts_considered"] = r.considered;
  j["layouts_fitting"] = r.fitting.size();
  j["fields"] = search_fields_json(r);
  j["best"] = nlohmann::json::array();
  for (int i = 0; i < int(r.fitting.size()) && i < top; i++)
    j["best"].push_back(estimate_json(r.fitting[i], in));
  j["faster_but_out_of_memory"] = nlohmann::json::array();
  for (int i = 0; i < int(r.faster_oom.size()) && i < 3; i++)
    j["faster_but_out_of_memory"].push_back(estimate_json(r.faster_oom[i], in));
  return j;
}

}  // namespace kiln::plan

namespace kiln::plan {

std::string cluster_summary_text(const ClusterSpec& c, const ClusterSummary& s) {
  std::string out = fmt::format("cluster: {}\n  {}\n", c.describe(), c.device.description);
  auto row = [&](const std::string& what, const std::string& value) {
    out += fmt::format("  {:<40} {}\n", what, value);
  };
  row("devices", fmt::format("{} ({} node{} × {})", s.gpus, s.nodes, s.nodes == 1 ? "" : "s",
                             s.gpus_per_node));
  row("memory",
      fmt::format("{} GiB per device, {} TiB in all; {} GB/s per device", amount(s.hbm_per_gpu_gib),
                  amount(s.hbm_total_tib), amount(s.hbm_bw_per_gpu_gbs)));
  for (const auto& p : s.peaks)
    row("peak " + p.dtype + (p.dtype == "fp32" ? "" : " dense"),
        fmt::format("{} TFLOP/s per device, {} PFLOP/s in all", amount(p.per_gpu),
                    amount(p.total)));
  if (s.topology == "torus")
    row("ICI links (torus)",
        fmt::format("{} GB/s per chip each way over all its links ({} as a collective's bus "
                    "bandwidth), {} GB/s per host",
                    amount(s.intra_per_gpu_gbs), amount(s.intra_per_gpu_effective_gbs),
                    amount(s.intra_per_node_gbs)));
  else if (s.gpus_per_node > 1)
    row("inside a node (" + s.intra_link + ")",
        fmt::format("{} GB/s per device each way ({} as a collective's bus bandwidth), {} GB/s "
                    "per node",
                    amount(s.intra_per_gpu_gbs), amount(s.intra_per_gpu_effective_gbs),
                    amount(s.intra_per_node_gbs)));
  if (!(s.nic_gbps > 0 && s.nics_per_node > 0))
    row("between nodes", "no network described (nic_gbps 0)");
  else
    row("between nodes (" + s.network + ")",
        fmt::format("{} × {:g} Gb/s per node = {} GB/s each way; {} GB/s per device ({} as a "
                    "collective's bus bandwidth)",
                    s.nics_per_node, s.nic_gbps, amount(s.inter_per_node_gbs),
                    amount(s.inter_per_gpu_gbs), amount(s.inter_per_gpu_effective_gbs)));
  if (s.nodes > 1) {
    row("injection, all nodes", fmt::format("{} GB/s each way", amount(s.injection_total_gbs)));
    row("bisection (" + s.topology + ")",
        fmt::format("{} GB/s each way ({})", amount(s.bisection_gbs), s.bisection_how));
  }
  if (s.has_power) {
    row("power", fmt::format("{} kW IT ({} × {:g} W {} + {} × {:g} W rest of node), {} kW at "
                             "PUE {:g}",
                             amount(s.it_kw), s.gpus, s.gpu_w, s.power_source, s.nodes,
                             s.node_overhead_w, amount(s.facility_kw), s.pue));
  }
  if (!s.power_note.empty()) row("power note", s.power_note);
  if (s.rent_usd_per_hour > 0)
    row("rent",
        fmt::format("${} per hour, ${} per day ({} devices × ${:g})", amount(s.rent_usd_per_hour),
                    amount(24 * s.rent_usd_per_hour), s.gpus, s.rent_usd_per_hour / s.gpus));
  if (s.energy_usd_per_hour > 0)
    row("electricity",
        fmt::format("${} per hour, ${} per day ({} kW at PUE {:g})", amount(s.energy_usd_per_hour),
                    amount(24 * s.energy_usd_per_hour), amount(s.facility_kw), s.pue));
  if (s.co2_kg_per_hour > 0)
    row("CO2", fmt::format("{} kg per hour, {} tonnes per day", amount(s.co2_kg_per_hour),
                           amount(24 * s.co2_kg_per_hour / 1000)));
  row("sources", s.source.empty() ? "(none given)" : s.source);
  return out;
}

nlohmann::json cluster_summary_json(const ClusterSpec& c, const ClusterSummary& s) {
  nlohmann::json peaks = nlohmann::json::object();
  for (const auto& p : s.peaks)
    peaks[p.dtype == "bf16/fp16" ? "bf16" : p.dtype] = {{"per_gpu_tflops", p.per_gpu},
                                                        {"total_pflops", p.total}};
  nlohmann::json j = {{"cluster", c.describe()},
                      {"device", c.device.name},
                      {"description", c.device.description},
                      {"gpus", s.gpus},
                      {"nodes", s.nodes},
                      {"gpus_per_node", s.gpus_per_node},
                      {"memory",
                       {{"per_gpu_gib", s.hbm_per_gpu_gib},
                        {"total_tib", s.hbm_total_tib},
                        {"bandwidth_per_gpu_gbs", s.hbm_bw_per_gpu_gbs}}},
                      {"peak", peaks},
                      {"intra_node",
                       {{"link", s.intra_link},
                        {"per_gpu_gbs", s.intra_per_gpu_gbs},
                        {"per_gpu_effective_gbs", s.intra_per_gpu_effective_gbs},
                        {"per_node_gbs", s.intra_per_node_gbs}}},
                      {"inter_node",
                       {{"network", s.network},
                        {"topology", s.topology},
                        {"nics_per_node", s.nics_per_node},
                        {"nic_gbps", s.nic_gbps},
                        {"per_node_gbs", s.inter_per_node_gbs},
                        {"per_gpu_gbs", s.inter_per_gpu_gbs},
                        {"per_gpu_effective_gbs", s.inter_per_gpu_effective_gbs},
                        {"injection_total_gbs", s.injection_total_gbs},
                        {"bisection_gbs", s.bisection_gbs},
                        {"bisection_how", s.bisection_how}}},
                      {"source", s.source}};
  if (c.device.power_cap_w > 0) j["power_cap_w"] = c.device.power_cap_w;
  if (s.has_power)
    j["power"] = {{"gpu_w", s.gpu_w},
                  {"gpu_w_from", s.power_source},
                  {"node_overhead_w", s.node_overhead_w},
                  {"it_kw", s.it_kw},
                  {"pue", s.pue},
                  {"facility_kw", s.facility_kw}};
  else
    j["power"] = nullptr;
  if (!s.power_note.empty()) j["power_note"] = s.power_note;
  auto per_hour = [](double v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
  j["per_hour"] = {{"rent_usd", per_hour(s.rent_usd_per_hour)},
                   {"electricity_usd", per_hour(s.energy_usd_per_hour)},
                   {"co2_kg", per_hour(s.co2_kg_per_hour)}};
  return j;
}

}  // namespace kiln::plan
