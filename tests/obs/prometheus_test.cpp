// The Prometheus registry's text exposition, and the server answering a real HTTP request.
#include "obs/prometheus.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>

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

TEST(Prometheus, AnAddressItCannotBindIsAnErrorNamingIt) {
  auto r = std::make_shared<MetricsRegistry>();
  std::string err = kiln::testing::error_of([&] { MetricsServer s(r, "192.0.2.123", 9); });
  EXPECT_NE(err.find("192.0.2.123:9"), std::string::npos) << err;
}

}  // namespace
}  // namespace kiln
