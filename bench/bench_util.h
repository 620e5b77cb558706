// Helpers shared by the tierkv benches: options, timing, JSON-lines output, a
// progress line, pre-faulted buffers and the memcpy baseline.
//
// Rules every bench follows (see docs/benchmarks.md):
//  - stdout carries results only: JSON lines with --json, a table without;
//    everything else (progress, the human summary under --json) goes to stderr.
//  - memory is faulted in before any timing: first touch of fresh pages runs
//    ~10x slower than memcpy on these machines and is never measured.
//  - each figure is compared against a baseline measured in the same run.
// Thread-safety: none of these helpers are shared between threads.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "device/io_buffer.h"
#include "tierkv/status.h"

namespace tierkv::bench {

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;
inline constexpr uint64_t kGiB = 1024 * kMiB;

// Flags shared by every bench subcommand.
struct CommonOptions {
  bool json = false;        // JSON lines on stdout (human summary on stderr)
  bool progress = false;    // force the progress line even if stderr is no tty
  int reps = 3;             // repetitions; the median is reported
  std::string config_path;  // JSON config for the client ("" = env/defaults)
};

// ---- Timing -----------------------------------------------------------------

using BenchClock = std::chrono::steady_clock;

class Stopwatch {
 public:
  Stopwatch() : start_(BenchClock::now()) {}
  void Restart() { start_ = BenchClock::now(); }
  double Seconds() const {
    return std::chrono::duration<double>(BenchClock::now() - start_).count();
  }

 private:
  BenchClock::time_point start_;
};

// Median of the values (mean of the middle two for an even count); 0 if empty.
double Median(std::vector<double> values);
// Decimal gigabytes per second (1e9 bytes), as LIMITS.md and memcpy tools use.
double Gbps(uint64_t bytes, double seconds);
// A figure rounded to 3 decimals, as the JSON lines print them.
double Round3(double value);
// Round3 of the figure as a JSON number, or null when the figure does not exist.
nlohmann::ordered_json OrNull(const std::optional<double>& value);

// One path's paired reps: its GB/s and its ratio against the baseline of the same rep
// (paired, interleaved runs: the ratio of each rep, then their median and spread).
struct PairedFigure {
  std::vector<double> gbps, ratios;
  void Add(double value, double baseline) {
    gbps.push_back(value);
    ratios.push_back(baseline > 0 ? value / baseline : 0);
  }
  double median_gbps() const { return Median(gbps); }
  double ratio() const { return Median(ratios); }
  double ratio_min() const { return *std::min_element(ratios.begin(), ratios.end()); }
  double ratio_max() const { return *std::max_element(ratios.begin(), ratios.end()); }
};

// ---- Output -----------------------------------------------------------------

// One JSON object, keys in the order added, printed as one line. nlohmann-json
// stays inside bench_util.cc so the benches compile fast.
class JsonLine {
 public:
  JsonLine();
  ~JsonLine();
  JsonLine(const JsonLine&) = delete;
  JsonLine& operator=(const JsonLine&) = delete;

  JsonLine& Add(std::string_view key, std::string_view value);
  JsonLine& Add(std::string_view key, const char* value) {
    return Add(key, std::string_view(value));
  }
  template <typename T>
  requires std::is_arithmetic_v<T> JsonLine& Add(std::string_view key, T value) {
    if constexpr (std::is_same_v<T, bool>) {
      return AddBool(key, value);
    } else if constexpr (std::is_floating_point_v<T>) {
      return AddDouble(key, static_cast<double>(value));
    } else if constexpr (std::is_signed_v<T>) {
      return AddInt(key, static_cast<int64_t>(value));
    } else {
      return AddUint(key, static_cast<uint64_t>(value));
    }
  }

  // A JSON array of numbers.
  JsonLine& Add(std::string_view key, const std::vector<double>& values);

  std::string Dump() const;
  // Writes Dump() and a newline to stdout and flushes, so a reader of a pipe
  // sees each line as soon as it is measured.
  void Emit() const;

 private:
  JsonLine& AddBool(std::string_view key, bool value);
  JsonLine& AddDouble(std::string_view key, double value);
  JsonLine& AddInt(std::string_view key, int64_t value);
  JsonLine& AddUint(std::string_view key, uint64_t value);
  std::unique_ptr<nlohmann::ordered_json> json_;
};

// "256 KiB", "2 MiB", "1.5 GiB", "64 B".
std::string FormatBytes(uint64_t bytes);

// A one-line progress indicator on stderr, rewritten in place on a tty and
// printed as plain lines otherwise (only when forced with --progress).
// Disabled unless stderr is a tty or `force`. Never call it inside a timed region.
class Progress {
 public:
  Progress(std::string_view bench, bool force);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  bool enabled() const { return enabled_; }
  void Update(std::string_view message);
  // Clears the line (tty) so that following output starts on a clean line.
  void Done();

 private:
  std::string bench_;
  bool enabled_ = false;
  bool tty_ = false;
  size_t last_len_ = 0;
};

// ---- Buffers ----------------------------------------------------------------

// Benchmark buffers are the SSD tier's IO buffers: anonymous memory, 2 MiB
// pages where the kernel gives them, pre-faulted before they are returned (first
// touch must never be measured). size() may be rounded up to the page size.
using AlignedBuffer = IoBuffer;

// Fills [data, data+size) with a pattern that depends on `seed` and on the
// position of every 8-byte word, so misplaced or stale bytes are detected.
void FillPattern(uint8_t* data, size_t size, uint64_t seed);

// The two buffers of a transfer bench, `bytes` each and pre-faulted: `src` filled with the
// pattern of `seed` (FillPattern), `dst` where gets land. Says so on `progress`.
struct TransferBuffers {
  AlignedBuffer src;
  AlignedBuffer dst;
};
Result<TransferBuffers> AllocateTransferBuffers(uint64_t bytes, uint64_t seed, Progress& progress);

// ---- Baseline ---------------------------------------------------------------

// One contiguous copy: `bytes` from `src` to `dst`.
struct CopyPiece {
  const uint8_t* src;
  uint8_t* dst;
  size_t bytes;
};

// Plain single-thread std::memcpy of every piece, in order. Returns the
// elapsed seconds. The reference every data-path figure is compared against.
double TimedMemcpy(const std::vector<CopyPiece>& pieces);

// ---- Checks -----------------------------------------------------------------

// "OBJECT_NOT_FOUND (-704)" for a per-key result code.
std::string CodeString(int64_t code);

// INTERNAL_ERROR with `message`: a step of a bench that went wrong (a process, a call, a check).
Status Failed(std::string message);

// Collects failures found by the (untimed) checks: a count and the first few
// messages, turned into one Status at the end of a phase.
class FailureLog {
 public:
  void Add(std::string message);
  bool empty() const { return count_ == 0; }
  size_t count() const { return count_; }
  // OK when empty; otherwise INTERNAL_ERROR "<context>: N failure(s); first: ...".
  Status ToStatus(std::string_view context) const;

 private:
  static constexpr size_t kKept = 3;
  size_t count_ = 0;
  std::vector<std::string> first_;
};

// ---- Misc -------------------------------------------------------------------

// Splits `size` into `pieces` parts (pieces >= 1); the last takes the remainder.
std::vector<size_t> PieceSizes(uint64_t size, size_t pieces);

// 64 lower-case hex characters derived from `value` (a stand-in for a SHA-256
// chunk hash), deterministic across runs.
std::string HexHash64(uint64_t value);

// True if `program` is an executable in a $PATH directory.
bool OnPath(const std::string& program);
// Runs argv[0] (searched on PATH) with the child's stdout and stderr sent to the given files
// ("" = this process's stderr: stdout carries results only). Returns the exit status, or -1
// with *error set when the program could not be started or did not exit normally (*signaled,
// when given, then says whether a signal killed it).
int RunProgram(const std::vector<std::string>& args, const std::string& stdout_path,
               const std::string& stderr_path, std::string* error, bool* signaled = nullptr);
// `apt-get install -y --no-install-recommends <package>` (as root, else through `sudo -n`),
// running `apt-get update` and retrying once if the first install fails (a fresh machine may
// have no package lists). The commands' output goes to stderr, failures are logged there
// with `log_prefix`. The caller checks the result itself (e.g. OnPath).
void AptInstall(const std::string& package, const std::string& log_prefix);
// A fresh cluster token (64 hex characters) in a private file of a temporary directory, both
// removed with the object: what the benches run a cluster with when they measure the token.
class TempTokenFile {
 public:
  static Result<std::unique_ptr<TempTokenFile>> Create();
  ~TempTokenFile();
  const std::string& path() const { return path_; }

 private:
  std::string dir_, path_;
};

// A CA and a certificate for 127.0.0.1 signed by it (ca.pem, store.pem, store.key), made with
// Debian's openssl in a temporary directory removed with the object: what `bench remote --tls`
// runs the data plane's TLS with. INTERNAL_ERROR when openssl is missing or fails.
class TempTlsFiles {
 public:
  static Result<std::unique_ptr<TempTlsFiles>> Create();
  ~TempTlsFiles();
  std::string ca() const { return dir_ + "/ca.pem"; }
  std::string cert() const { return dir_ + "/store.pem"; }
  std::string key() const { return dir_ + "/store.key"; }

 private:
  std::string dir_;
};

// splitmix64: a cheap, well-mixed 64-bit hash.
uint64_t Mix64(uint64_t x);

}  // namespace tierkv::bench
