#include "obs/prometheus.h"

#include <httplib.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "core/error.h"

namespace kiln {

namespace {

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

// Prometheus floats: Go's formatting of +Inf, -Inf and NaN; otherwise enough digits to round
// trip.
std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

}  // namespace

std::string render_labels(const MetricLabels& labels) {
  if (labels.empty()) return "";
  std::string s = "{";
  for (size_t i = 0; i < labels.size(); i++) {
    if (i) s += ",";
    s += labels[i].first + "=\"" + escape_label(labels[i].second) + "\"";
  }
  return s + "}";
}

void MetricsRegistry::declare(const std::string& name, Type type, const std::string& help) {
  std::lock_guard<std::mutex> lock(mu_);
  if (families_.count(name)) return;
  families_[name] = Family{type, help, {}, {}};
  order_.push_back(name);
}

MetricsRegistry::Family& MetricsRegistry::family(const std::string& name) {
  auto it = families_.find(name);
  if (it == families_.end()) fail("internal: metric {} was never declared", name);
  return it->second;
}

void MetricsRegistry::set(const std::string& name, double value, const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  family(name).series[render_labels(labels)] = value;
}

void MetricsRegistry::add(const std::string& name, double delta, const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  family(name).series[render_labels(labels)] += delta;
}

void MetricsRegistry::set_function(const std::string& name, std::function<double()> f) {
  std::lock_guard<std::mutex> lock(mu_);
  family(name).fn = std::move(f);
}

std::string MetricsRegistry::exposition() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& name : order_) {
    const Family& f = families_.at(name);
    std::vector<std::pair<std::string, double>> values(f.series.begin(), f.series.end());
    if (f.fn) {
      double v = f.fn();
      if (!std::isnan(v)) values.emplace_back("", v);
    }
    if (values.empty()) continue;  // nothing to say yet (e.g. no validation so far)
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, f.help, name,
                       f.type == Type::Counter ? "counter" : "gauge");
    for (const auto& [labels, v] : values) out += name + labels + " " + format_value(v) + "\n";
  }
  return out;
}

struct MetricsServer::Impl {
  httplib::Server server;
  std::thread thread;
};

MetricsServer::MetricsServer(std::shared_ptr<const MetricsRegistry> registry,
                             const std::string& host, int port)
    : impl_(std::make_unique<Impl>()) {
  impl_->server.Get("/metrics", [registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry->exposition(), "text/plain; version=0.0.4; charset=utf-8");
  });
  impl_->server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("kiln: metrics at /metrics\n", "text/plain");
  });
  if (port == 0) {
    port_ = impl_->server.bind_to_any_port(host.c_str());
  } else {
    port_ = impl_->server.bind_to_port(host.c_str(), port) ? port : -1;
  }
  if (port_ < 0)
    fail(
        "--metrics-port: cannot listen on {}:{} (in use, or not an address of this machine); "
        "choose another port or --metrics-host",
        host, port);
  impl_->thread = std::thread([this] { impl_->server.listen_after_bind(); });
  // stop() is a no-op until the server runs: wait for it, or the destructor could hang.
  while (!impl_->server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

MetricsServer::~MetricsServer() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace kiln
