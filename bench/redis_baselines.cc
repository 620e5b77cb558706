#include "redis_baselines.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "bench_util.h"
#include "tcp_stream.h"

namespace tierkv::bench {

namespace {
constexpr size_t kStagingBytes = 64 * 1024;
}  // namespace

RawRespReader::RawRespReader(int fd) : fd_(fd), staging_(kStagingBytes) {}

RawRespReader::RawRespReader(RawRespReader&& other) noexcept { *this = std::move(other); }

RawRespReader& RawRespReader::operator=(RawRespReader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    staging_ = std::move(other.staging_);
    begin_ = std::exchange(other.begin_, 0);
    end_ = std::exchange(other.end_, 0);
    request_ = std::move(other.request_);
  }
  return *this;
}

RawRespReader::~RawRespReader() {
  if (fd_ >= 0) ::close(fd_);
}

Result<RawRespReader> RawRespReader::Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Failed(std::string("redis raw client: socket: ") + std::strerror(errno));
  RawRespReader reader(fd);
  const timeval timeout{60, 0};
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Failed("redis raw client: connect to 127.0.0.1:" + std::to_string(port) + ": " +
                  std::strerror(errno));
  }
  return reader;
}

Result<std::string> RawRespReader::ReadLine() {
  for (;;) {
    const char* start = staging_.data() + begin_;
    const char* stop = staging_.data() + end_;
    const char* cr = static_cast<const char*>(std::memchr(start, '\r', stop - start));
    if (cr != nullptr && cr + 1 < stop) {
      std::string line(start, cr);
      begin_ = static_cast<size_t>(cr + 2 - staging_.data());
      return line;
    }
    if (Status s = Refill(); !s.ok()) return s;
  }
}

Status RawRespReader::Refill() {
  if (begin_ > 0) {  // keep the unread bytes at the front
    std::memmove(staging_.data(), staging_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (end_ == staging_.size()) return Failed("redis raw client: a reply line over 64 KiB");
  for (;;) {
    const ssize_t n = ::recv(fd_, staging_.data() + end_, staging_.size() - end_, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Failed(std::string("redis raw client: the connection ended: ") +
                    (n == 0 ? "closed" : std::strerror(errno)));
    }
    end_ += static_cast<size_t>(n);
    return Status::Ok();
  }
}

Status RawRespReader::ReadValue(uint8_t* dst, size_t size) {
  const size_t buffered = std::min(size, end_ - begin_);
  std::memcpy(dst, staging_.data() + begin_, buffered);
  begin_ += buffered;
  if (buffered < size && !ReadAll(fd_, dst + buffered, size - buffered)) {
    return Failed(std::string("redis raw client: a value ended early: ") + std::strerror(errno));
  }
  // The value's CRLF.
  while (end_ - begin_ < 2) {
    if (Status s = Refill(); !s.ok()) return s;
  }
  if (staging_[begin_] != '\r' || staging_[begin_ + 1] != '\n') {
    return Failed("redis raw client: a value is not followed by CRLF");
  }
  begin_ += 2;
  return Status::Ok();
}

Status RawRespReader::GetObjects(const TransferWorkload& workload, size_t first, size_t end,
                                 size_t batch) {
  for (size_t from = first; from < end; from += batch) {
    const size_t to = std::min(end, from + batch);
    request_.clear();
    for (size_t i = from; i < to; ++i) {
      const std::string& key = workload.key(i);
      request_ += "*2\r\n$3\r\nGET\r\n$";
      request_ += std::to_string(key.size());
      request_ += "\r\n";
      request_ += key;
      request_ += "\r\n";
    }
    if (!WriteAll(fd_, request_.data(), request_.size())) {
      return Failed(std::string("redis raw client: send: ") + std::strerror(errno));
    }
    for (size_t i = from; i < to; ++i) {
      Result<std::string> header = ReadLine();
      if (!header.ok()) return Failed(header.status().message() + " (GET " + workload.key(i) + ")");
      size_t len = 0;
      const std::string& h = *header;
      const bool bulk = h.size() > 1 && h[0] == '$' &&
                        std::from_chars(h.data() + 1, h.data() + h.size(), len).ec == std::errc();
      if (!bulk || len != workload.object_bytes()) {
        return Failed("redis raw client: GET " + workload.key(i) + " answered '" +
                      h.substr(0, 200) + "', expected a string of " +
                      std::to_string(workload.object_bytes()) + " bytes");
      }
      if (Status s = ReadValue(workload.dst_object(i), len); !s.ok()) return s;
    }
  }
  return Status::Ok();
}

namespace {

// The GET line of redis-benchmark's --csv output: requests per second.
Result<double> GetRps(const std::string& csv_path) {
  std::ifstream in(csv_path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("\"GET\",\"", 0) != 0) continue;
    const size_t start = 7;
    const size_t stop = line.find('"', start);
    double rps = 0;
    if (stop != std::string::npos &&
        std::from_chars(line.data() + start, line.data() + stop, rps).ec == std::errc()) {
      return rps;
    }
  }
  return Failed("redis-benchmark printed no GET line in " + csv_path);
}

}  // namespace

Result<RedisBenchmarkRun> RunRedisBenchmarkTool(int port, uint64_t object_bytes, size_t requests,
                                                size_t connections, size_t pipeline,
                                                const std::string& work_dir) {
  RedisBenchmarkRun run;
  if (!OnPath("redis-benchmark")) {
    run.detail = "redis-benchmark not on PATH (Debian's redis-tools)";
    return run;
  }
  run.available = true;
  for (const size_t p : {size_t{1}, pipeline}) {
    const std::string csv = work_dir + "/redis-benchmark.csv";
    const std::string err = work_dir + "/redis-benchmark.stderr";
    const std::vector<std::string> args = {"redis-benchmark",
                                           "-h",
                                           "127.0.0.1",
                                           "-p",
                                           std::to_string(port),
                                           "-t",
                                           "set,get",
                                           "-d",
                                           std::to_string(object_bytes),
                                           "-c",
                                           std::to_string(connections),
                                           "-n",
                                           std::to_string(requests),
                                           "-P",
                                           std::to_string(p),
                                           "--csv"};
    std::string error;
    const int rc = RunProgram(args, csv, err, &error);
    if (rc != 0) {
      std::ifstream in(err);
      std::stringstream text;
      text << in.rdbuf();
      return Failed("redis-benchmark " + (rc < 0 ? error : "exited " + std::to_string(rc)) + ": " +
                    text.str().substr(0, 300));
    }
    Result<double> rps = GetRps(csv);
    if (!rps.ok()) return rps.status();
    const double gbps = *rps * static_cast<double>(object_bytes) / 1e9;
    if (gbps > run.gbps) {
      run.gbps = gbps;
      run.detail = "-c " + std::to_string(connections) + " -P " + std::to_string(p) + " -n " +
                   std::to_string(requests);
    }
    if (p == pipeline) break;
  }
  return run;
}

}  // namespace tierkv::bench
