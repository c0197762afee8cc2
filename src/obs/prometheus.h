// Prometheus metrics: a registry of gauges and counters (with labels) that the trainer sets, and
// an HTTP server that serves them at /metrics in the text exposition format (version 0.0.4).
// Values are read under a lock, so a scrape sees each series whole; the server runs on its own
// thread (cpp-httplib) and never touches the training loop.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class MetricsRegistry {
 public:
  enum class Type { Gauge, Counter };
  // Declares a metric family; set()/add() on an undeclared name is an internal error.
  void declare(const std::string& name, Type type, const std::string& help);
  void set(const std::string& name, double value, const MetricLabels& labels = {});
  void add(const std::string& name, double delta, const MetricLabels& labels = {});
  // A gauge whose value is computed at each scrape (e.g. seconds since the last checkpoint);
  // the function returns nothing (std::nullopt-like NaN skipped) while it has no value.
  void set_function(const std::string& name, std::function<double()> f);
  // The whole registry in the text exposition format.
  std::string exposition() const;

 private:
  struct Family {
    Type type;
    std::string help;
    std::map<std::string, double> series;  // rendered label set -> value
    std::function<double()> fn;
  };
  Family& family(const std::string& name);
  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
  std::vector<std::string> order_;  // declaration order, for a readable page
};

// Label values escaped as the exposition format requires (\\, \", \n).
std::string render_labels(const MetricLabels& labels);

// Fails, naming --metrics-port, unless port is a TCP port (0: any free one, to 65535).
void check_metrics_port(int port);

// http://HOST:PORT/metrics, with an IPv6 host in brackets (http://[::1]:9400/metrics).
std::string metrics_url(const std::string& host, int port);

class MetricsServer {
 public:
  // Binds host:port (port 0 picks a free one, 0..65535) and serves /metrics from its own threads:
  // one per open connection, up to 64, so idle keep-alive or slow clients (dropped after 2 s of
  // silence) do not hold a scrape back. Fails with a message naming the address when it cannot
  // bind.
  MetricsServer(std::shared_ptr<const MetricsRegistry> registry, const std::string& host, int port);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  int port() const { return port_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace kiln
