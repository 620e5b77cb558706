#include "tierkv/status.h"

#include <cstdio>
#include <cstdlib>

namespace tierkv {

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
#define TIERKV_CASE(name) \
  case ErrorCode::name:   \
    return #name;
    TIERKV_CASE(OK)
    TIERKV_CASE(INTERNAL_ERROR)
    TIERKV_CASE(BUFFER_OVERFLOW)
    TIERKV_CASE(SEGMENT_NOT_FOUND)
    TIERKV_CASE(SEGMENT_ALREADY_EXISTS)
    TIERKV_CASE(NO_AVAILABLE_HANDLE)
    TIERKV_CASE(INVALID_KEY)
    TIERKV_CASE(INVALID_PARAMS)
    TIERKV_CASE(INVALID_WRITE)
    TIERKV_CASE(INVALID_READ)
    TIERKV_CASE(REPLICA_IS_NOT_READY)
    TIERKV_CASE(OBJECT_NOT_FOUND)
    TIERKV_CASE(OBJECT_ALREADY_EXISTS)
    TIERKV_CASE(OBJECT_HAS_LEASE)
    TIERKV_CASE(LEASE_EXPIRED)
    TIERKV_CASE(TRANSFER_FAIL)
    TIERKV_CASE(CHECKSUM_MISMATCH)
    TIERKV_CASE(RPC_FAIL)
    TIERKV_CASE(UNAVAILABLE_IN_CURRENT_MODE)
    TIERKV_CASE(FILE_NOT_FOUND)
    TIERKV_CASE(FILE_OPEN_FAIL)
    TIERKV_CASE(FILE_READ_FAIL)
    TIERKV_CASE(FILE_WRITE_FAIL)
    TIERKV_CASE(FILE_INVALID_BUFFER)
    TIERKV_CASE(FILE_LOCK_FAIL)
    TIERKV_CASE(FILE_INVALID_HANDLE)
    TIERKV_CASE(BUFFER_NOT_REGISTERED)
    TIERKV_CASE(DUPLICATE_KEY)
    TIERKV_CASE(OBJECT_TOO_LARGE)
    TIERKV_CASE(INVALID_CONFIG)
    TIERKV_CASE(UNAUTHENTICATED)
#undef TIERKV_CASE
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(ErrorCodeName(code_));
  out += " (" + std::to_string(ToInt(code_)) + ")";
  if (!message_.empty()) out += ": " + message_;
  return out;
}

void AbortOnFailedResult(const Status& status) {
  std::fprintf(stderr, "tierkv: the value of a failed Result was read: %s\n",
               status.ToString().c_str());
  std::abort();
}

}  // namespace tierkv
