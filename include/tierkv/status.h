// Status and Result<T>: the error model of every public tierkv call.
//
// Codes are negative integers. Where the meaning matches, they follow Mooncake
// Store's numbering (mooncake-store/include/types.h) so that engine code written
// for Mooncake reads them right. tierkv-only codes live in -1500..-1599.
// docs/errors.md lists every code. Thread-safety: value types, no shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace tierkv {

enum class ErrorCode : int32_t {
  OK = 0,
  INTERNAL_ERROR = -1,
  BUFFER_OVERFLOW = -10,  // destination buffers smaller than the object
  SEGMENT_NOT_FOUND = -101,
  SEGMENT_ALREADY_EXISTS = -102,
  NO_AVAILABLE_HANDLE = -200,  // no space, even after eviction
  INVALID_KEY = -400,          // empty, too long, not UTF-8, contains NUL
  INVALID_PARAMS = -600,
  INVALID_WRITE = -700,  // PutEnd/PutRevoke on an object that is not pending
  INVALID_READ = -701,
  REPLICA_IS_NOT_READY = -703,  // object exists but its put has not ended
  OBJECT_NOT_FOUND = -704,
  OBJECT_ALREADY_EXISTS = -705,
  OBJECT_HAS_LEASE = -706,
  LEASE_EXPIRED = -707,  // transfer outlived its read lease; bytes discarded
  TRANSFER_FAIL = -800,
  CHECKSUM_MISMATCH = -801,
  RPC_FAIL = -900,
  UNAVAILABLE_IN_CURRENT_MODE = -1011,
  // File and device IO (the SSD tier); the message names the path or offset and the errno text.
  FILE_NOT_FOUND = -1100,
  FILE_OPEN_FAIL = -1101,       // creating/opening/sizing a tier file failed
  FILE_READ_FAIL = -1102,       // a read failed or came back short
  FILE_WRITE_FAIL = -1103,      // a write failed or came back short (EIO, ENOSPC, ...)
  FILE_INVALID_BUFFER = -1104,  // reserved (Mooncake's code); misaligned IO is INVALID_PARAMS
  FILE_LOCK_FAIL = -1105,
  FILE_INVALID_HANDLE = -1106,
  // tierkv-only codes.
  BUFFER_NOT_REGISTERED = -1500,  // a batch buffer outside any registered one
  DUPLICATE_KEY = -1501,          // the key appears earlier in the same batch
  OBJECT_TOO_LARGE = -1502,       // bigger than any mounted segment
  INVALID_CONFIG = -1503,         // configuration rejected at startup
  UNAUTHENTICATED = -1504,        // a peer without the cluster's credential (token, certificate)
};

// Short upper-case name of a code ("OBJECT_NOT_FOUND"); "UNKNOWN" otherwise.
std::string_view ErrorCodeName(ErrorCode code);
inline int32_t ToInt(ErrorCode code) { return static_cast<int32_t>(code); }

// A cheap success/failure value. The message is only allocated on failure.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == ErrorCode::OK; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "OBJECT_NOT_FOUND (-704): <message>".
  std::string ToString() const;

 private:
  ErrorCode code_ = ErrorCode::OK;
  std::string message_;
};

// Prints `status` to stderr and aborts: what reading the value of a failed Result does.
[[noreturn]] void AbortOnFailedResult(const Status& status);

// A value or a failed Status. Accessing the value of a failed Result (value(), *, ->) aborts
// with the status on stderr; check ok() first.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {
    if (status_.ok()) status_ = Status(ErrorCode::INTERNAL_ERROR, "Result built from OK status");
  }
  Result(ErrorCode code, std::string message) : status_(code, std::move(message)) {}

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  ErrorCode code() const { return status_.code(); }
  T& value() & { return Checked(); }
  const T& value() const& { return Checked(); }
  T&& value() && { return std::move(Checked()); }
  T* operator->() { return &Checked(); }
  const T* operator->() const { return &Checked(); }
  T& operator*() & { return Checked(); }
  const T& operator*() const& { return Checked(); }

 private:
  T& Checked() {
    if (!value_.has_value()) AbortOnFailedResult(status_);
    return *value_;
  }
  const T& Checked() const {
    if (!value_.has_value()) AbortOnFailedResult(status_);
    return *value_;
  }

  std::optional<T> value_;
  Status status_;
};

}  // namespace tierkv
