#include "device/faulty_device.h"

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace tierkv {
namespace {

bool IsWriteFault(FaultKind kind) {
  return kind == FaultKind::kWriteEio || kind == FaultKind::kShortWrite ||
         kind == FaultKind::kWriteEnospc;
}

std::string Injected(int err) { return std::string(std::strerror(err)) + " (injected)"; }

}  // namespace

FaultyDevice::FaultyDevice(std::unique_ptr<Device> inner)
    : Device(inner->size(), inner->alignment()), inner_(std::move(inner)) {}

Status FaultyDevice::AddFault(const FaultRule& rule) {
  if (rule.trigger == FaultTrigger::kEveryNth && rule.every_n == 0) {
    return Status(ErrorCode::INVALID_PARAMS, "fault rule: every_n must be >= 1");
  }
  if (rule.trigger == FaultTrigger::kOffsetRange && rule.range_begin >= rule.range_end) {
    return Status(ErrorCode::INVALID_PARAMS, "fault rule: empty offset range");
  }
  std::lock_guard<std::mutex> lock(mu_);
  rules_.push_back(ArmedRule{rule, 0, false});
  return Status::Ok();
}

void FaultyDevice::ClearFaults() {
  std::lock_guard<std::mutex> lock(mu_);
  rules_.clear();
}

FaultCounters FaultyDevice::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

std::optional<FaultKind> FaultyDevice::Decide(bool write, uint64_t offset, uint64_t len) {
  std::lock_guard<std::mutex> lock(mu_);
  ++(write ? counters_.writes : counters_.reads);
  std::optional<FaultKind> fault;
  for (ArmedRule& armed : rules_) {
    if (IsWriteFault(armed.rule.kind) != write) continue;
    ++armed.seen;
    if (fault.has_value() || armed.spent) continue;  // later rules still count the request
    bool fires = false;
    switch (armed.rule.trigger) {
      case FaultTrigger::kOnce:
        fires = true;
        armed.spent = true;
        break;
      case FaultTrigger::kEveryNth:
        fires = armed.seen % armed.rule.every_n == 0;
        break;
      case FaultTrigger::kOffsetRange:
        fires = offset < armed.rule.range_end && armed.rule.range_begin < offset + len;
        break;
    }
    if (fires) fault = armed.rule.kind;
  }
  if (fault.has_value()) {
    switch (*fault) {
      case FaultKind::kReadEio:
        ++counters_.read_eio;
        break;
      case FaultKind::kWriteEio:
        ++counters_.write_eio;
        break;
      case FaultKind::kShortRead:
        ++counters_.short_read;
        break;
      case FaultKind::kShortWrite:
        ++counters_.short_write;
        break;
      case FaultKind::kWriteEnospc:
        ++counters_.write_enospc;
        break;
    }
  }
  return fault;
}

Status FaultyDevice::Apply(std::optional<FaultKind> fault, bool write, uint64_t offset, void* buf,
                           uint64_t len) {
  if (!fault.has_value()) {
    return write ? inner_->Write(offset, buf, len) : inner_->Read(offset, buf, len);
  }
  switch (*fault) {
    case FaultKind::kReadEio:
    case FaultKind::kWriteEio:
      return IoError(write, offset, len, Injected(EIO));
    case FaultKind::kWriteEnospc:
      return IoError(write, offset, len, Injected(ENOSPC));
    case FaultKind::kShortRead:
    case FaultKind::kShortWrite: {
      const uint64_t half = (len / 2) & ~(alignment() - 1);
      if (half > 0) {
        Status status = write ? inner_->Write(offset, buf, half) : inner_->Read(offset, buf, half);
        if (!status.ok()) return status;
      }
      Status status = ShortIoError(write, offset, half, len);
      return Status(status.code(), status.message() + " (injected)");
    }
  }
  return Status(ErrorCode::INTERNAL_ERROR, "unknown fault kind");
}

Status FaultyDevice::DoRead(uint64_t offset, void* buf, uint64_t len) {
  return Apply(Decide(/*write=*/false, offset, len), /*write=*/false, offset, buf, len);
}

Status FaultyDevice::DoWrite(uint64_t offset, const void* buf, uint64_t len) {
  return Apply(Decide(/*write=*/true, offset, len), /*write=*/true, offset, const_cast<void*>(buf),
               len);
}

std::vector<Status> FaultyDevice::DoReadBatch(const std::vector<IoRequest>& requests,
                                              const IoDone& on_done) {
  return Batch(requests, /*write=*/false, on_done);
}

std::vector<Status> FaultyDevice::DoWriteBatch(const std::vector<IoRequest>& requests,
                                               const IoDone& on_done) {
  return Batch(requests, /*write=*/true, on_done);
}

std::vector<Status> FaultyDevice::Batch(const std::vector<IoRequest>& requests, bool write,
                                        const IoDone& on_done) {
  std::vector<Status> results(requests.size());
  std::vector<std::optional<FaultKind>> faults(requests.size());
  std::vector<IoRequest> clean;
  std::vector<size_t> clean_index;
  for (size_t i = 0; i < requests.size(); ++i) {
    faults[i] = Decide(write, requests[i].offset, requests[i].len);
    if (!faults[i].has_value()) {
      clean.push_back(requests[i]);
      clean_index.push_back(i);
    }
  }
  if (!clean.empty()) {
    IoDone inner_done;
    if (on_done) {
      inner_done = [&](size_t k, const Status& status) { on_done(clean_index[k], status); };
    }
    std::vector<Status> done =
        write ? inner_->WriteBatch(clean, inner_done) : inner_->ReadBatch(clean, inner_done);
    for (size_t i = 0; i < clean.size(); ++i) results[clean_index[i]] = std::move(done[i]);
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    if (faults[i].has_value()) {
      results[i] = Apply(faults[i], write, requests[i].offset, requests[i].buf, requests[i].len);
      if (on_done) on_done(i, results[i]);
    }
  }
  return results;
}

}  // namespace tierkv
