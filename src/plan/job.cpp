#include "plan/job.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

#include "core/closest_name.h"
#include "core/error.h"

namespace kiln::plan {

void use_attention_kernel(JobSpec& j, const std::string& name) {
  j.software.flash_of_peak = find_attention_kernel(name).rates;
  j.attention_kernel = name;
}

std::string attention_kernel_problem(const DeviceSpec& d, const JobSpec& j) {
  if (j.attention_unpad && !j.flash_attention)
    return "--attention-unpad unpads for a variable-length flash kernel: it needs --attention "
           "flash";
  if (j.attention_kernel.empty()) return "";
  if (!j.flash_attention)
    return fmt::format(
        "--attention-kernel {} is a fused attention kernel: it needs --attention flash",
        j.attention_kernel);
  const AttentionKernel& k = find_attention_kernel(j.attention_kernel);
  std::vector<std::string> archs;
  for (const FlashRate& r : k.rates) {
    if (r.arch == d.arch) return "";
    archs.push_back(r.arch);
  }
  return fmt::format(
      "--attention-kernel {} has no published benchmark on {} ({}): it was measured on {}; leave "
      "it out to use the software profile's attention rate",
      j.attention_kernel, d.name, d.arch.empty() ? "no GPU architecture" : d.arch,
      join_names(archs));
}

JobSpec::CpComm parse_cp_comm(const std::string& s) {
  if (s == "ring") return JobSpec::CpComm::ring;
  if (s == "all-gather") return JobSpec::CpComm::all_gather;
  fail("--cp-comm must be ring or all-gather, got '{}'", s);
}

const char* cp_comm_name(JobSpec::CpComm c) {
  return c == JobSpec::CpComm::ring ? "ring" : "all-gather";
}

double JobSpec::grad_bytes() const {
  if (dtype == Dtype::fp32) return 4;
  if (grad_reduce) return *grad_reduce == Dtype::fp32 ? 4 : 2;
  return software.grad_bytes(dtype);
}

std::string JobSpec::grad_reduce_name() const {
  if (dtype == Dtype::fp32) return "fp32";
  if (grad_reduce) return dtype_name(*grad_reduce);
  if (grad_bytes() == 4) return "fp32";
  return dtype == Dtype::fp16 ? "fp16" : "bf16";
}

void JobSpec::validate() const {
  if (seq_len < 1) fail("--seq-len must be at least 1, got {}", seq_len);
  if (global_batch_tokens < seq_len)
    fail("--global-batch-tokens ({}) must hold at least one sequence of --seq-len {}",
         global_batch_tokens, seq_len);
  if (global_batch_tokens % seq_len != 0)
    fail("--global-batch-tokens ({}) is not a whole number of {}-token sequences; use {}",
         global_batch_tokens, seq_len, global_batch_seqs() * seq_len);
  if (!(train_tokens > 0)) fail("--tokens (training tokens) must be positive");
  if (!(train_tokens < 1e18)) fail("--tokens must be below 1e18, got {:g}", train_tokens);
  // A batch above the budget would make one step that trains more tokens than asked for, and
  // every figure of the run would describe that step, not the budget: refuse it.
  if (double(global_batch_tokens) > train_tokens && train_tokens < seq_len)
    fail(
        "--tokens {:.0f} is less than one sequence of --seq-len {}: train at least {} tokens, or "
        "plan shorter sequences",
        train_tokens, seq_len, seq_len);
  if (double(global_batch_tokens) > train_tokens)
    fail(
        "the global batch of {} tokens (--global-batch-tokens) is larger than the training "
        "budget of {:.0f} tokens (--tokens): the run would be a single step of more tokens than "
        "asked for; lower --global-batch-tokens to at most {:.0f} or raise --tokens to at least {}",
        global_batch_tokens, train_tokens, std::floor(train_tokens / seq_len) * seq_len,
        global_batch_tokens);
  if (fp8_param_gather && dtype != Dtype::fp8)
    fail("--fp8-param-gather gathers fp8 weights: it needs --dtype fp8 (got {})",
         dtype_name(dtype));
  if (grad_reduce == Dtype::fp8)
    fail("--grad-reduce must be bf16, fp16 or fp32: gradients are not reduced in fp8");
  if (mem_allowance < 0 || mem_allowance > 1)
    fail("--mem-allowance is a fraction in [0, 1], got {}", mem_allowance);
  if (!std::isfinite(usd_per_gpu_hour) || usd_per_gpu_hour < 0)
    fail("--usd-per-gpu-hour must be a finite price, not negative (got {})", usd_per_gpu_hour);
  auto price = [](double v, const char* flag) {
    if (!std::isfinite(v) || v < 0)
      fail("{} must be a finite price, not negative (got {})", flag, v);
  };
  price(reserved_usd_per_gpu_hour, "--reserved-usd-per-gpu-hour");
  price(spot_usd_per_gpu_hour, "--spot-usd-per-gpu-hour");
  price(capex_usd_per_gpu, "--capex-usd-per-gpu");
  price(usd_per_kwh, "--usd-per-kwh");
  if (!std::isfinite(spot_monthly_interruption) || spot_monthly_interruption < 0)
    fail(
        "--spot-monthly-interruption is the share of nodes reclaimed in a month, 0 or more (got "
        "{})",
        spot_monthly_interruption);
  if (!std::isfinite(spot_restart_minutes))
    fail("--spot-restart-minutes must be finite, got {}", spot_restart_minutes);
  if (!std::isfinite(depreciation_years) || depreciation_years <= 0)
    fail("--depreciation-years must be more than 0, got {}", depreciation_years);
  if (!std::isfinite(utilisation) || utilisation <= 0 || utilisation > 1)
    fail("--utilisation is the share of the hardware's life it runs jobs, in (0, 1] (got {})",
         utilisation);
  if (capex_usd_per_gpu > 0 && usd_per_kwh == 0)
    fail(
        "--capex-usd-per-gpu prices owned hardware, which also pays for its electricity: give "
        "--usd-per-kwh");
  if (gpu_power_w < 0) fail("--gpu-power-w must not be negative");
  if (pue < 1) fail("--pue is total facility power over IT power, at least 1 (got {})", pue);
  if (gco2_per_kwh < 0) fail("--gco2-per-kwh must not be negative");
  if (!std::isfinite(failures_per_gpu_hour) || failures_per_gpu_hour < 0)
    fail("--failures-per-gpu-hour must be 0 (no failures) or more, got {}", failures_per_gpu_hour);
  if (!std::isfinite(restart_minutes) || restart_minutes < 0)
    fail("--restart-minutes must be 0 or more, got {}", restart_minutes);
  if (!std::isfinite(ckpt_write_gbs) || ckpt_write_gbs < 0)
    fail("--ckpt-write-gbs must be 0 (one NIC's line rate) or more, got {}", ckpt_write_gbs);
  if (!std::isfinite(storage_gbs) || storage_gbs <= 0)
    fail("--storage-gbs must be more than 0, got {}", storage_gbs);
}

int64_t JobSpec::steps() const {
  if (global_batch_tokens <= 0) return 0;
  // Whole tokens; integer division so that a budget of exactly k batches is k steps.
  const int64_t tokens = int64_t(std::ceil(train_tokens));
  return (tokens + global_batch_tokens - 1) / global_batch_tokens;
}

double parse_count(const std::string& text, const std::string& flag) {
  const char* begin = text.c_str();
  char* end = nullptr;
  double v = std::strtod(begin, &end);
  if (end == begin) fail("{} '{}' is not a number (e.g. 2e12, 300B, 4M or 4Mi)", flag, text);
  std::string suffix(end);
  const std::pair<const char*, double> units[] = {{"", 1},
                                                  {"K", 1e3},
                                                  {"M", 1e6},
                                                  {"B", 1e9},
                                                  {"G", 1e9},
                                                  {"T", 1e12},
                                                  {"Ki", 1024.0},
                                                  {"Mi", 1048576.0},
                                                  {"Gi", 1073741824.0},
                                                  {"Ti", 1099511627776.0}};
  for (auto& [name, scale] : units)
    if (suffix == name) {
      v *= scale;
      if (!std::isfinite(v))
        fail("{} must be a finite number (e.g. 2e12, 300B, 4M or 4Mi), got '{}'", flag, text);
      if (!(v > 0)) fail("{} must be positive, got '{}'", flag, text);
      return v;
    }
  fail(
      "{} '{}': unknown suffix '{}'; use K, M, B, T (powers of 1000) or Ki, Mi, Gi, Ti (of "
      "1024)",
      flag, text, suffix);
}

}  // namespace kiln::plan
