// AuthCollector: how many requests a process refused for a missing or wrong cluster credential
// (<prefix>unauthenticated_total, by plane), read when scraped from a callback. The master and
// the store add one each; docs/metrics.md lists them. Thread-safety: thread-safe if the
// callback is.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tierkv {

struct AuthFigures {
  uint64_t control = 0;  // gRPC calls refused (UNAUTHENTICATED)
  uint64_t data = 0;     // data-port hellos refused
};

class AuthCollector final : public prometheus::Collectable {
 public:
  // `prefix`: "tierkv_master_" or "tierkv_store_".
  AuthCollector(std::string prefix, std::function<AuthFigures()> figures)
      : prefix_(std::move(prefix)), figures_(std::move(figures)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::string prefix_;
  const std::function<AuthFigures()> figures_;
};

}  // namespace tierkv
