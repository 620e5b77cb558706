#include "bench_util.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "common/cluster_token.h"

extern char** environ;

namespace tierkv::bench {
double Median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

double Gbps(uint64_t bytes, double seconds) {
  return seconds > 0.0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
}

double Round3(double value) { return std::round(value * 1000.0) / 1000.0; }

nlohmann::ordered_json OrNull(const std::optional<double>& value) {
  return value ? nlohmann::ordered_json(Round3(*value)) : nlohmann::ordered_json(nullptr);
}

JsonLine::JsonLine()
    : json_(std::make_unique<nlohmann::ordered_json>(nlohmann::ordered_json::object())) {}
JsonLine::~JsonLine() = default;

JsonLine& JsonLine::Add(std::string_view key, std::string_view value) {
  (*json_)[std::string(key)] = std::string(value);
  return *this;
}
JsonLine& JsonLine::AddBool(std::string_view key, bool value) {
  (*json_)[std::string(key)] = value;
  return *this;
}
JsonLine& JsonLine::AddDouble(std::string_view key, double value) {
  (*json_)[std::string(key)] = value;
  return *this;
}
JsonLine& JsonLine::Add(std::string_view key, const std::vector<double>& values) {
  (*json_)[std::string(key)] = values;
  return *this;
}
JsonLine& JsonLine::AddInt(std::string_view key, int64_t value) {
  (*json_)[std::string(key)] = value;
  return *this;
}
JsonLine& JsonLine::AddUint(std::string_view key, uint64_t value) {
  (*json_)[std::string(key)] = value;
  return *this;
}

std::string JsonLine::Dump() const { return json_->dump(); }

void JsonLine::Emit() const { std::cout << Dump() << '\n' << std::flush; }

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  double value = static_cast<double>(bytes);
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (value == static_cast<double>(static_cast<uint64_t>(value))) {
    std::snprintf(text, sizeof(text), "%" PRIu64 " %s", static_cast<uint64_t>(value), kUnits[unit]);
  } else {
    std::snprintf(text, sizeof(text), "%.1f %s", value, kUnits[unit]);
  }
  return text;
}

// ---- Progress ---------------------------------------------------------------

Progress::Progress(std::string_view bench, bool force) : bench_(bench) {
  tty_ = ::isatty(STDERR_FILENO) == 1;
  enabled_ = tty_ || force;
}

Progress::~Progress() { Done(); }

void Progress::Update(std::string_view message) {
  if (!enabled_) return;
  std::string line = "[" + bench_ + "] " + std::string(message);
  if (tty_) {
    // Pad with spaces to wipe the rest of a longer previous line.
    const size_t len = line.size();
    if (len < last_len_) line.append(last_len_ - len, ' ');
    last_len_ = len;
    std::cerr << '\r' << line << std::flush;
  } else {
    std::cerr << line << '\n' << std::flush;
  }
}

void Progress::Done() {
  if (!enabled_ || !tty_ || last_len_ == 0) return;
  std::cerr << '\r' << std::string(last_len_, ' ') << '\r' << std::flush;
  last_len_ = 0;
}

Result<TransferBuffers> AllocateTransferBuffers(uint64_t bytes, uint64_t seed, Progress& progress) {
  progress.Update("allocating and pre-faulting 2 x " + FormatBytes(bytes) + " of buffers");
  Result<AlignedBuffer> src = AlignedBuffer::Allocate(bytes);
  if (!src.ok()) return src.status();
  Result<AlignedBuffer> dst = AlignedBuffer::Allocate(bytes);
  if (!dst.ok()) return dst.status();
  FillPattern(src->data(), src->size(), seed);
  return TransferBuffers{std::move(src).value(), std::move(dst).value()};
}

void FillPattern(uint8_t* data, size_t size, uint64_t seed) {
  const uint64_t base = Mix64(seed);
  const size_t words = size / sizeof(uint64_t);
  for (size_t k = 0; k < words; ++k) {
    const uint64_t value = base ^ (k * 0x9E3779B97F4A7C15ull);
    std::memcpy(data + k * sizeof(uint64_t), &value, sizeof(value));
  }
  const uint64_t last = base ^ (words * 0x9E3779B97F4A7C15ull);
  std::memcpy(data + words * sizeof(uint64_t), &last, size % sizeof(uint64_t));
}

// ---- Baseline ---------------------------------------------------------------

double TimedMemcpy(const std::vector<CopyPiece>& pieces) {
  Stopwatch watch;
  for (const CopyPiece& piece : pieces) std::memcpy(piece.dst, piece.src, piece.bytes);
  // Keep the copies ordered before the clock read and observable.
  asm volatile("" ::: "memory");
  return watch.Seconds();
}

// ---- Checks -----------------------------------------------------------------

std::string CodeString(int64_t code) {
  return std::string(ErrorCodeName(static_cast<ErrorCode>(code))) + " (" + std::to_string(code) +
         ")";
}

Status Failed(std::string message) { return Status(ErrorCode::INTERNAL_ERROR, std::move(message)); }

void FailureLog::Add(std::string message) {
  ++count_;
  if (first_.size() < kKept) first_.push_back(std::move(message));
}

Status FailureLog::ToStatus(std::string_view context) const {
  if (count_ == 0) return Status::Ok();
  std::string text = std::string(context) + ": " + std::to_string(count_) + " failure" +
                     (count_ == 1 ? "" : "s") + "; first: ";
  for (size_t i = 0; i < first_.size(); ++i) text += (i ? "; " : "") + first_[i];
  return Status(ErrorCode::INTERNAL_ERROR, text);
}

// ---- Misc -------------------------------------------------------------------

uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::vector<size_t> PieceSizes(uint64_t size, size_t pieces) {
  std::vector<size_t> out(pieces, size / pieces);
  out.back() += size % pieces;
  return out;
}

std::string HexHash64(uint64_t value) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(64, '0');
  for (int part = 0; part < 4; ++part) {
    uint64_t word = Mix64(value * 4 + static_cast<uint64_t>(part));
    for (int i = 15; i >= 0; --i) {
      out[static_cast<size_t>(part * 16 + i)] = kHex[word & 0xF];
      word >>= 4;
    }
  }
  return out;
}

bool OnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    // Built with append(): GCC 12 at -O3 warns (-Wrestrict, a known false
    // positive) on `dir + "/" + program`.
    std::string candidate = dir.empty() ? std::string(".") : dir;
    candidate.append("/").append(program);
    if (access(candidate.c_str(), X_OK) == 0) return true;
  }
  return false;
}

int RunProgram(const std::vector<std::string>& args, const std::string& stdout_path,
               const std::string& stderr_path, std::string* error, bool* signaled) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (stdout_path.empty()) {
    posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, stdout_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
  }
  if (!stderr_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
  }
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    *error = "cannot start " + args[0] + ": " + std::strerror(rc);
    return -1;
  }
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) {
      *error = "waitpid(" + args[0] + "): " + std::strerror(errno);
      return -1;
    }
  }
  if (!WIFEXITED(wstatus)) {
    *error = args[0] + " was killed by signal " + std::to_string(WTERMSIG(wstatus));
    if (signaled != nullptr) *signaled = WIFSIGNALED(wstatus);
    return -1;
  }
  return WEXITSTATUS(wstatus);
}

void AptInstall(const std::string& package, const std::string& log_prefix) {
  std::vector<std::string> prefix;
  if (geteuid() != 0) prefix = {"sudo", "-n"};
  // Runs one apt-get command with its output on stderr (stdout carries results only).
  auto apt = [&](std::vector<std::string> args) {
    std::vector<std::string> words = prefix;
    words.insert(words.end(), {"env", "DEBIAN_FRONTEND=noninteractive", "apt-get"});
    words.insert(words.end(), args.begin(), args.end());
    std::string error;
    const int rc = RunProgram(words, "", "", &error);
    if (rc < 0) std::cerr << log_prefix << ": " << error << std::endl;
    return rc == 0;
  };
  if (!apt({"install", "-y", "--no-install-recommends", package})) {
    (void)apt({"update"});
    (void)apt({"install", "-y", "--no-install-recommends", package});
  }
}

Result<std::unique_ptr<TempTokenFile>> TempTokenFile::Create() {
  char dir[] = "/tmp/tierkv-bench-token-XXXXXX";
  if (mkdtemp(dir) == nullptr) {
    return Status(ErrorCode::INTERNAL_ERROR, std::string("mkdtemp: ") + std::strerror(errno));
  }
  std::unique_ptr<TempTokenFile> file(new TempTokenFile());
  file->dir_ = dir;
  file->path_ = file->dir_ + "/token";
  const TokenDigest secret = RandomNonce();
  {
    std::ofstream out(file->path_);
    for (uint8_t b : secret) out << "0123456789abcdef"[b >> 4] << "0123456789abcdef"[b & 15];
    if (!out) return Status(ErrorCode::INTERNAL_ERROR, "cannot write " + file->path_);
  }
  if (chmod(file->path_.c_str(), 0600) != 0) {
    return Status(ErrorCode::INTERNAL_ERROR, "chmod " + file->path_ + ": " + std::strerror(errno));
  }
  return file;
}

TempTokenFile::~TempTokenFile() {
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

Result<std::unique_ptr<TempTlsFiles>> TempTlsFiles::Create() {
  if (!OnPath("openssl")) {
    return Status(ErrorCode::INTERNAL_ERROR,
                  "openssl is not installed (apt-get install openssl): --tls makes its "
                  "certificates with it");
  }
  char dir[] = "/tmp/tierkv-bench-tls-XXXXXX";
  if (mkdtemp(dir) == nullptr) {
    return Status(ErrorCode::INTERNAL_ERROR, std::string("mkdtemp: ") + std::strerror(errno));
  }
  std::unique_ptr<TempTlsFiles> files(new TempTlsFiles());
  files->dir_ = dir;
  const std::string script = files->dir_ + "/make.sh";
  std::ofstream(script)
      << "set -e\ncd '" << files->dir_ << "'\nexec >/dev/null 2>&1\n"
      << "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=tierkv-bench-ca "
         "-keyout ca.key -out ca.pem\n"
      << "openssl req -newkey rsa:2048 -nodes -subj /CN=tierkv-bench-store -keyout store.key "
         "-out store.csr\n"
      << "echo subjectAltName=IP:127.0.0.1 > san.ext\n"
      << "openssl x509 -req -in store.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
         "-extfile san.ext -out store.pem\n"
      << "chmod 600 store.key ca.key\n";
  if (std::system(("/bin/sh '" + script + "'").c_str()) != 0) {
    return Status(ErrorCode::INTERNAL_ERROR, "openssl could not make the bench's certificates");
  }
  return files;
}

TempTlsFiles::~TempTlsFiles() {
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

}  // namespace tierkv::bench
