// Marks a read that may race a writer by design and is validated afterwards (a lease checked
// after the copy, a checksum): the bytes of a racing read are discarded, never returned. Under
// ThreadSanitizer the scope's accesses are not recorded, so such a read is not reported as a
// data race; other builds compile it to nothing. Keep the scope to the copy itself.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define TIERKV_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TIERKV_TSAN 1
#endif
#endif

#ifdef TIERKV_TSAN
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
#endif

namespace tierkv {

class OptimisticReadScope {
 public:
#ifdef TIERKV_TSAN
  OptimisticReadScope() { AnnotateIgnoreReadsBegin(__FILE__, __LINE__); }
  ~OptimisticReadScope() { AnnotateIgnoreReadsEnd(__FILE__, __LINE__); }
#else
  OptimisticReadScope() {}  // user-provided: a scope variable is not "unused"
#endif
  OptimisticReadScope(const OptimisticReadScope&) = delete;
  OptimisticReadScope& operator=(const OptimisticReadScope&) = delete;
};

}  // namespace tierkv
