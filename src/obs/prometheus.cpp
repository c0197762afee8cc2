#include "obs/prometheus.h"

#include <httplib.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

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

namespace {

// host:port as a URL writes it: an IPv6 literal in brackets (RFC 3986), or its colons read as the
// port's, with a zone's "%" escaped (RFC 6874: [fe80::1%25eth0]).
std::string host_port(const std::string& host, int port) {
  if (host.find(':') == std::string::npos || host.front() == '[')
    return fmt::format("{}:{}", host, port);
  std::string h;
  for (char c : host) h += c == '%' ? std::string("%25") : std::string(1, c);
  return fmt::format("[{}]:{}", h, port);
}

}  // namespace

void check_metrics_port(int port) {
  if (port < 0 || port > 65535)
    fail("--metrics-port {}: a TCP port is 0 (any free port) to 65535", port);
}

std::string metrics_url(const std::string& host, int port) {
  return "http://" + host_port(host, port) + "/metrics";
}

namespace {

// How long a connection may hold a thread without sending anything: a scrape sends its request at
// once, so only idle keep-alive connections and slow clients meet these.
constexpr time_t kReadTimeoutSeconds = 2;
constexpr time_t kWriteTimeoutSeconds = 2;
constexpr time_t kKeepAliveSeconds = 2;
constexpr size_t kKeepAliveRequests = 16;
// Connections served at once; more wait in a queue, each for at most the timeouts above.
constexpr size_t kMaxConnectionThreads = 64;

// cpp-httplib hands each accepted connection to a task queue, and a connection holds its thread
// until it closes. Its default pool has a fixed 8 threads, so 8 idle or slow clients left a
// scrape queued behind them. This pool starts a thread whenever a connection would otherwise
// wait (up to kMaxConnectionThreads; they stay for the server's life), so a scrape is answered
// at once whatever other clients do, as long as fewer than that many hold a thread.
class ConnectionPool : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(fn));
    if (jobs_.size() > idle_ && threads_.size() < kMaxConnectionThreads) {
      idle_++;  // counted idle from its start, so a burst starts one thread per connection
      threads_.emplace_back([this] { work(); });
    }
    cv_.notify_one();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, nothing left to serve
      std::function<void()> fn = std::move(jobs_.front());
      jobs_.pop_front();
      idle_--;
      lock.unlock();
      fn();
      lock.lock();
      idle_++;
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stop_ = false;
};

}  // namespace

struct MetricsServer::Impl {
  httplib::Server server;
  std::thread thread;
};

MetricsServer::MetricsServer(std::shared_ptr<const MetricsRegistry> registry,
                             const std::string& host, int port)
    : impl_(std::make_unique<Impl>()) {
  check_metrics_port(port);
  httplib::Server& s = impl_->server;
  s.new_task_queue = [] { return new ConnectionPool; };
  s.set_read_timeout(kReadTimeoutSeconds, 0);
  s.set_write_timeout(kWriteTimeoutSeconds, 0);
  s.set_keep_alive_timeout(kKeepAliveSeconds);
  s.set_keep_alive_max_count(kKeepAliveRequests);
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
        "--metrics-port: cannot listen on {} (in use, or not an address of this machine); "
        "choose another port or --metrics-host",
        host_port(host, port));
  impl_->thread = std::thread([this] { impl_->server.listen_after_bind(); });
  // stop() is a no-op until the server runs: wait for it, or the destructor could hang.
  while (!impl_->server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

MetricsServer::~MetricsServer() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace kiln
