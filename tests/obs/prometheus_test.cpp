// The Prometheus registry's text exposition, and the server answering a real HTTP request.
#include "obs/prometheus.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "core/error.h"
#include "test_util.h"

namespace kiln {
namespace {

TEST(Prometheus, ExpositionHasHelpTypeAndLabelledSeries) {
  MetricsRegistry r;
  r.declare("kiln_loss", MetricsRegistry::Type::Gauge, "Mean training loss.");
  r.declare("kiln_tokens_total", MetricsRegistry::Type::Counter, "Tokens.");
  r.declare("kiln_memory_bytes", MetricsRegistry::Type::Gauge, "Memory by kind.");
  r.declare("kiln_val_loss", MetricsRegistry::Type::Gauge, "Not set yet.");
  r.set("kiln_loss", 2.5);
  r.add("kiln_tokens_total", 100);
  r.add("kiln_tokens_total", 28);
  r.set("kiln_memory_bytes", 1024, {{"kind", "params"}});
  r.set("kiln_memory_bytes", 2048, {{"kind", "grads"}});
  EXPECT_EQ(r.exposition(),
            "# HELP kiln_loss Mean training loss.\n"
            "# TYPE kiln_loss gauge\n"
            "kiln_loss 2.5\n"
            "# HELP kiln_tokens_total Tokens.\n"
            "# TYPE kiln_tokens_total counter\n"
            "kiln_tokens_total 128\n"
            "# HELP kiln_memory_bytes Memory by kind.\n"
            "# TYPE kiln_memory_bytes gauge\n"
            "kiln_memory_bytes{kind=\"grads\"} 2048\n"
            "kiln_memory_bytes{kind=\"params\"} 1024\n");
}

TEST(Prometheus, EscapesLabelValuesAndFormatsSpecialValues) {
  EXPECT_EQ(render_labels({{"path", "a\\b\"c\nd"}}), "{path=\"a\\\\b\\\"c\\nd\"}");
  MetricsRegistry r;
  r.declare("x", MetricsRegistry::Type::Gauge, "x");
  r.set("x", std::nan(""), {{"k", "nan"}});
  r.set("x", INFINITY, {{"k", "inf"}});
  r.set("x", -INFINITY, {{"k", "ninf"}});
  std::string e = r.exposition();
  EXPECT_NE(e.find("x{k=\"nan\"} NaN\n"), std::string::npos) << e;
  EXPECT_NE(e.find("x{k=\"inf\"} +Inf\n"), std::string::npos) << e;
  EXPECT_NE(e.find("x{k=\"ninf\"} -Inf\n"), std::string::npos) << e;
}

TEST(Prometheus, FunctionGaugeIsComputedAtEachScrapeAndHiddenWithoutValue) {
  MetricsRegistry r;
  r.declare("age", MetricsRegistry::Type::Gauge, "Seconds since.");
  double v = std::nan("");
  r.set_function("age", [&] { return v; });
  EXPECT_EQ(r.exposition(), "");
  v = 7;
  EXPECT_NE(r.exposition().find("age 7\n"), std::string::npos);
}

TEST(Prometheus, UndeclaredMetricIsAnError) {
  MetricsRegistry r;
  EXPECT_NE(kiln::testing::error_of([&] { r.set("nope", 1); }).find("nope"), std::string::npos);
}

TEST(Prometheus, ServerAnswersMetricsOverHttp) {
  auto r = std::make_shared<MetricsRegistry>();
  r->declare("kiln_step", MetricsRegistry::Type::Gauge, "Steps.");
  r->set("kiln_step", 42);
  MetricsServer server(r, "127.0.0.1", 0);
  ASSERT_GT(server.port(), 0);
  httplib::Client c("127.0.0.1", server.port());
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->get_header_value("Content-Type").find("version=0.0.4"), std::string::npos);
  EXPECT_NE(res->body.find("kiln_step 42\n"), std::string::npos) << res->body;
}

// A TCP connection to 127.0.0.1:port that sends nothing (-1 if it cannot connect).
int open_idle_connection(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(Prometheus, ScrapeAnswersPromptlyWhileIdleAndSlowClientsHoldConnections) {
  auto r = std::make_shared<MetricsRegistry>();
  r->declare("kiln_step", MetricsRegistry::Type::Gauge, "Steps.");
  r->set("kiln_step", 7);
  MetricsServer server(r, "127.0.0.1", 0);
  // 20 idle keep-alive connections, and 4 slow-loris clients that send a partial request and
  // then one more byte every half second (each byte restarts a read timeout). Before: the 8
  // threads of cpp-httplib's pool were taken and the scrape waited behind them (25 s and more).
  std::vector<int> idle;
  for (int i = 0; i < 20; i++) {
    int fd = open_idle_connection(server.port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  std::atomic<bool> done{false};
  std::vector<std::thread> slow;
  for (int i = 0; i < 4; i++)
    slow.emplace_back([&] {
      int fd = open_idle_connection(server.port());
      if (fd < 0) return;
      const std::string partial = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
      if (send(fd, partial.data(), partial.size(), MSG_NOSIGNAL) < 0) return;
      while (!done) {
        if (send(fd, "a", 1, MSG_NOSIGNAL) < 0) break;  // the server may drop us: fine
        for (int k = 0; k < 5 && !done; k++)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      close(fd);
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // all of them accepted
  for (int scrape = 0; scrape < 2; scrape++) {
    const auto t0 = std::chrono::steady_clock::now();
    httplib::Client c("127.0.0.1", server.port());
    c.set_connection_timeout(30);
    c.set_read_timeout(30);
    auto res = c.Get("/metrics");
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(res) << "scrape " << scrape << " failed after " << sec << " s";
    EXPECT_EQ(res->status, 200);
    EXPECT_NE(res->body.find("kiln_step 7\n"), std::string::npos) << res->body;
    EXPECT_LT(sec, 10.0) << "scrape " << scrape << " waited behind idle and slow clients";
  }
  done = true;
  for (auto& t : slow) t.join();
  for (int fd : idle) close(fd);
}

TEST(Prometheus, MetricsUrlBracketsAnIpv6Host) {
  EXPECT_EQ(metrics_url("127.0.0.1", 9400), "http://127.0.0.1:9400/metrics");
  EXPECT_EQ(metrics_url("localhost", 80), "http://localhost:80/metrics");
  EXPECT_EQ(metrics_url("::1", 9400), "http://[::1]:9400/metrics");
  EXPECT_EQ(metrics_url("::", 1), "http://[::]:1/metrics");
  EXPECT_EQ(metrics_url("fe80::1%eth0", 9400), "http://[fe80::1%25eth0]:9400/metrics");
  EXPECT_EQ(metrics_url("[::1]", 9400), "http://[::1]:9400/metrics");  // already bracketed
}

TEST(Prometheus, APortOutsideTcpsRangeIsAnErrorNamingTheOption) {
  auto r = std::make_shared<MetricsRegistry>();
  for (int port : {-1, 65536, 70000}) {
    std::string err = kiln::testing::error_of([&] { MetricsServer s(r, "127.0.0.1", port); });
    EXPECT_NE(err.find("--metrics-port " + std::to_string(port)), std::string::npos) << err;
    EXPECT_NE(err.find("65535"), std::string::npos) << err;
  }
}

TEST(Prometheus, AnAddressItCannotBindIsAnErrorNamingIt) {
  auto r = std::make_shared<MetricsRegistry>();
  std::string err = kiln::testing::error_of([&] { MetricsServer s(r, "192.0.2.123", 9); });
  EXPECT_NE(err.find("192.0.2.123:9"), std::string::npos) << err;
}

}  // namespace
}  // namespace kiln
