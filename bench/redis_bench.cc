#include "redis_bench.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <latch>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fio_runner.h"
#include "local_cluster.h"
#include "redis_baselines.h"
#include "tierkv/client.h"
#include "tierkv/config.h"
#include "workload.h"

#if TIERKV_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif

extern char** environ;

namespace tierkv::bench {

#if !TIERKV_HAVE_HIREDIS

Status RunRedisBench(const RedisBenchOptions&) {
  return Status(
      ErrorCode::UNAVAILABLE_IN_CURRENT_MODE,
      "this tierkv was built without hiredis (pkg-config 'hiredis' not found at "
      "configure time): install libhiredis-dev (scripts/install-deps.sh) and reconfigure");
}

#else  // TIERKV_HAVE_HIREDIS

namespace {

// ---- Installing redis-server --------------------------------------------------------------

// redis-server on PATH, or installed with apt-get (as root, else through `sudo -n`).
Status EnsureRedisServer(Progress* progress) {
  if (OnPath("redis-server")) return Status::Ok();
  progress->Update("redis-server is missing: apt-get install -y redis-server");
  std::cerr << "tierkv bench redis: redis-server not found on PATH; trying apt-get install -y "
               "redis-server"
            << std::endl;
  if (geteuid() != 0 && !OnPath("sudo")) {
    return Status(ErrorCode::UNAVAILABLE_IN_CURRENT_MODE,
                  "redis-server is not installed, and this process is not root and has no "
                  "sudo to install it; install redis-server (scripts/install-deps.sh lists "
                  "it) and run again");
  }
  AptInstall("redis-server", "tierkv bench redis");
  if (!OnPath("redis-server")) {
    return Status(ErrorCode::UNAVAILABLE_IN_CURRENT_MODE,
                  "redis-server is not installed and `apt-get install -y redis-server` failed; "
                  "install redis-server (scripts/install-deps.sh lists it) and run again");
  }
  return Status::Ok();
}

// ---- The redis-server process -------------------------------------------------------------

// A free TCP port on 127.0.0.1 (bound, read back, released: another process may take it
// before redis-server binds it, hence the retries in RedisServer::Start).
Result<int> FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Failed(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const std::string error = std::strerror(errno);
  ::close(fd);
  if (!ok) return Failed("cannot find a free port on 127.0.0.1: " + error);
  return static_cast<int>(ntohs(addr.sin_port));
}

struct RedisDeleter {
  void operator()(redisContext* context) const { redisFree(context); }
};
using RedisConnection = std::unique_ptr<redisContext, RedisDeleter>;

// A connection to 127.0.0.1:port with connect and IO timeouts.
Result<RedisConnection> Connect(int port, std::chrono::milliseconds connect_timeout) {
  timeval tv{};
  tv.tv_sec = connect_timeout.count() / 1000;
  tv.tv_usec = (connect_timeout.count() % 1000) * 1000;
  RedisConnection c(redisConnectWithTimeout("127.0.0.1", port, tv));
  if (c == nullptr) return Failed("redis: cannot allocate a connection");
  if (c->err != 0) {
    return Failed("redis: connect to 127.0.0.1:" + std::to_string(port) + ": " + c->errstr);
  }
  const timeval io{60, 0};  // a server that stops answering fails the run, not hangs it
  if (redisSetTimeout(c.get(), io) != REDIS_OK) return Failed("redis: cannot set the timeout");
  return c;
}

// One command with hiredis's own reply objects; the reply, or INTERNAL_ERROR.
Result<std::string> Command(redisContext* c, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* reply = static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
  if (reply == nullptr) return Failed("redis " + args[0] + ": " + c->errstr);
  std::string text = reply->str != nullptr ? std::string(reply->str, reply->len) : "";
  const int type = reply->type;
  freeReplyObject(reply);
  if (type == REDIS_REPLY_ERROR) return Failed("redis " + args[0] + ": " + text);
  return text;
}

// redis-server on 127.0.0.1, a free port, in its own temporary directory, without
// persistence. The child gets SIGKILL if this process dies (PR_SET_PDEATHSIG); the
// destructor stops it (SIGTERM, then SIGKILL after 5 s) and removes the directory.
class RedisServer {
 public:
  static Result<std::unique_ptr<RedisServer> > Start() {
    std::unique_ptr<RedisServer> server(new RedisServer());
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/tierkv-redis-bench-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      return Failed("mkdtemp " + pattern + ": " + std::strerror(errno));
    }
    server->dir_ = pattern;
    std::string last_error;
    for (int attempt = 0; attempt < 3; ++attempt) {
      Result<int> port = FreePort();
      if (!port.ok()) return port.status();
      Status started = server->Launch(*port);
      if (started.ok()) return server;
      last_error = started.message();
      server->Kill();
    }
    return Failed(last_error);
  }

  ~RedisServer() {
    Stop();
    if (!dir_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
    }
  }

  int port() const { return port_; }
  const std::string& dir() const { return dir_; }

  // SIGTERM, up to 5 s for it to exit, then SIGKILL. Idempotent.
  void Stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    Kill();
  }

 private:
  RedisServer() = default;

  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

  std::string LogTail() const {
    std::ifstream in(dir_ + "/redis.log");
    std::string line, tail;
    while (std::getline(in, line)) tail = line;
    return tail.empty() ? "(no log)" : tail;
  }

  // Starts redis-server on `port` and waits up to 10 s for it to answer PING.
  Status Launch(int port) {
    port_ = port;
    // Everything the child needs is built before fork: after it, only async-signal-safe
    // calls until exec.
    const std::vector<std::string> args = {"redis-server",
                                           "--bind",
                                           "127.0.0.1",
                                           "--port",
                                           std::to_string(port),
                                           "--save",
                                           "",
                                           "--appendonly",
                                           "no",
                                           "--dir",
                                           dir_,
                                           "--logfile",
                                           dir_ + "/redis.log",
                                           "--daemonize",
                                           "no",
                                           "--protected-mode",
                                           "yes",
                                           "--databases",
                                           "1"};
    std::vector<char*> argv;
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) return Failed(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) _exit(126);
      ::dup2(STDERR_FILENO, STDOUT_FILENO);  // stdout carries the bench's results only
      ::execvp(argv[0], argv.data());
      _exit(127);
    }
    pid_ = pid;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::string last = "no answer";
    while (std::chrono::steady_clock::now() < deadline) {
      int wstatus = 0;
      if (::waitpid(pid_, &wstatus, WNOHANG) == pid_) {
        pid_ = -1;
        return Failed("redis-server on port " + std::to_string(port) + " exited (status " +
                      std::to_string(wstatus) + "): " + LogTail());
      }
      Result<RedisConnection> c = Connect(port, std::chrono::milliseconds(200));
      if (c.ok()) {
        Result<std::string> pong = Command(c->get(), {"PING"});
        if (pong.ok() && *pong == "PONG") return Status::Ok();
        last = pong.ok() ? *pong : pong.status().message();
      } else {
        last = c.status().message();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return Failed("redis-server on port " + std::to_string(port) +
                  " did not answer PING within 10 s: " + last + "; log: " + LogTail());
  }

  std::string dir_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// ---- Replies straight into the destination --------------------------------------------------

// GET replies are parsed by hiredis with reply functions that copy each value from hiredis's
// read buffer straight into its destination slot (the slot the tierkv gets fill): no reply
// object is allocated and no second copy is made — the cheapest way hiredis delivers a value
// into a caller's buffer. The functions find the slot through this thread's sink.
struct ReplySink {
  uint8_t* dst = nullptr;
  size_t expected = 0;
  int type = 0;
  size_t len = 0;
  std::string error;
};
thread_local ReplySink* t_sink = nullptr;
char g_reply_marker;  // what the functions return as the "reply object"

void* SinkString(const redisReadTask* task, char* str, size_t len) {
  ReplySink* sink = t_sink;
  sink->type = task->type;
  sink->len = len;
  if (task->type == REDIS_REPLY_STRING && len == sink->expected) {
    std::memcpy(sink->dst, str, len);
  } else if (task->type == REDIS_REPLY_ERROR) {
    sink->error.assign(str, std::min<size_t>(len, 200));
  }
  return &g_reply_marker;
}
void* SinkArray(const redisReadTask* task, int) {
  t_sink->type = task->type;
  return &g_reply_marker;
}
void* SinkInteger(const redisReadTask* task, long long) {
  t_sink->type = task->type;
  return &g_reply_marker;
}
void* SinkNil(const redisReadTask*) {
  t_sink->type = REDIS_REPLY_NIL;
  return &g_reply_marker;
}
void SinkFree(void*) {}
redisReplyObjectFunctions g_sink_functions = {SinkString, SinkArray, SinkInteger, SinkNil,
                                              SinkFree};

// One GET connection: its objects [first, end) of the workload, in pipelines of `batch`.
struct Reader {
  RedisConnection connection;
  size_t first = 0;
  size_t end = 0;
  std::string error;  // the first failure of the last run
};

void ReadObjects(Reader* reader, TransferWorkload* workload, size_t batch) {
  redisContext* c = reader->connection.get();
  ReplySink sink;
  t_sink = &sink;
  reader->error.clear();
  const char* get = "GET";
  for (size_t first = reader->first; first < reader->end; first += batch) {
    const size_t end = std::min(reader->end, first + batch);
    for (size_t i = first; i < end; ++i) {
      const std::string& key = workload->key(i);
      const char* argv[2] = {get, key.data()};
      const size_t lens[2] = {3, key.size()};
      if (redisAppendCommandArgv(c, 2, argv, lens) != REDIS_OK) {
        reader->error = std::string("redis GET: ") + c->errstr;
        return;
      }
    }
    for (size_t i = first; i < end; ++i) {
      sink.dst = workload->dst_object(i);
      sink.expected = workload->object_bytes();
      sink.type = 0;
      sink.len = 0;
      void* reply = nullptr;
      if (redisGetReply(c, &reply) != REDIS_OK) {
        reader->error = "redis GET " + workload->key(i) + ": " + c->errstr;
        return;
      }
      if (sink.type != REDIS_REPLY_STRING || sink.len != sink.expected) {
        if (reader->error.empty()) {
          reader->error = "redis GET " + workload->key(i) + ": reply type " +
                          std::to_string(sink.type) + ", " + std::to_string(sink.len) +
                          " bytes, expected a string of " + std::to_string(sink.expected) +
                          (sink.error.empty() ? "" : " (" + sink.error + ")");
        }
      }
    }
  }
  t_sink = nullptr;
}

// The workload's objects SET on `c` (untimed), in pipelines of `batch`; every reply "OK".
Status Load(redisContext* c, const TransferWorkload& workload, size_t batch) {
  for (size_t first = 0; first < workload.objects(); first += batch) {
    const size_t end = std::min(workload.objects(), first + batch);
    for (size_t i = first; i < end; ++i) {
      const std::string& key = workload.key(i);
      const char* argv[3] = {"SET", key.data(),
                             reinterpret_cast<const char*>(workload.src_object(i))};
      const size_t lens[3] = {3, key.size(), workload.object_bytes()};
      if (redisAppendCommandArgv(c, 3, argv, lens) != REDIS_OK) {
        return Failed(std::string("redis SET: ") + c->errstr);
      }
    }
    for (size_t i = first; i < end; ++i) {
      void* raw = nullptr;
      if (redisGetReply(c, &raw) != REDIS_OK) {
        return Failed("redis SET " + workload.key(i) + ": " + c->errstr);
      }
      auto* reply = static_cast<redisReply*>(raw);
      const bool ok = reply->type == REDIS_REPLY_STATUS && std::string(reply->str) == "OK";
      const std::string text = reply->str != nullptr ? reply->str : "";
      freeReplyObject(reply);
      if (!ok) return Failed("redis SET " + workload.key(i) + ": " + text);
    }
  }
  return Status::Ok();
}

// Runs body(t) for t in [0, n) on n threads started together; the seconds from the start until
// the last returns, or the first failure.
Result<double> TimedOnThreads(size_t n, const std::function<Status(size_t)>& body) {
  std::vector<Status> results(n);
  std::latch ready(static_cast<std::ptrdiff_t>(n));
  std::latch go(1);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      ready.count_down();
      go.wait();
      results[t] = body(t);
    });
  }
  ready.wait();
  Stopwatch watch;
  go.count_down();
  for (std::thread& t : threads) t.join();
  const double seconds = watch.Seconds();
  for (const Status& s : results) {
    if (!s.ok()) return s;
  }
  return seconds;
}

// All hiredis readers at once; the seconds from the start to the last reply.
Result<double> TimedRedisGet(std::vector<Reader>& readers, TransferWorkload& workload, size_t batch,
                             int rep) {
  workload.Poison(rep);
  Result<double> seconds = TimedOnThreads(readers.size(), [&](size_t t) {
    ReadObjects(&readers[t], &workload, batch);
    return readers[t].error.empty() ? Status::Ok() : Failed(readers[t].error);
  });
  if (!seconds.ok()) return seconds;
  if (Status s = workload.CheckBytes(rep, "redis " + FormatBytes(workload.object_bytes()) + " get");
      !s.ok()) {
    return s;
  }
  return seconds;
}

// The raw RESP readers (redis_baselines.h), one thread and connection each, over the same
// shares of the objects as the hiredis readers; the seconds from the start to the last value.
Result<double> TimedRawGet(std::vector<RawRespReader>& raw, const std::vector<Reader>& readers,
                           TransferWorkload& workload, size_t batch, int rep) {
  workload.Poison(rep);
  Result<double> seconds = TimedOnThreads(raw.size(), [&](size_t t) {
    return raw[t].GetObjects(workload, readers[t].first, readers[t].end, batch);
  });
  if (!seconds.ok()) return seconds;
  if (Status s =
          workload.CheckBytes(rep, "redis raw " + FormatBytes(workload.object_bytes()) + " get");
      !s.ok()) {
    return s;
  }
  return seconds;
}

struct RedisSizeResult {
  uint64_t object_bytes = 0;
  size_t objects = 0;
  // Redis at its best: per rep, the fastest of the hiredis readers, the raw RESP readers and
  // redis-benchmark; each of them beside it (medians).
  double redis_gbps = 0, hiredis_gbps = 0, raw_gbps = 0;
  std::optional<double> tool_gbps;
  std::string tool_detail;
  double shm_get_gbps = 0, shm_put_gbps = 0, memcpy_gbps = 0;
  std::optional<double> tcp_get_gbps;
  // Per-rep ratios against that rep's best Redis figure.
  std::vector<double> shm_ratios, tcp_ratios;
  double shm_ratio() const { return Median(shm_ratios); }
  std::optional<double> tcp_ratio() const {
    if (tcp_ratios.empty()) return std::nullopt;
    return Median(tcp_ratios);
  }
};

// "%.2f" of the value, or "n/a" when it does not exist.
std::string Figure(const std::optional<double>& value) {
  if (!value) return "n/a";
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f", *value);
  return text;
}

void PrintHuman(std::ostream& out, const RedisBenchOptions& options, const std::string& version,
                const std::vector<RedisSizeResult>& results, const RedisSizeResult& summary,
                const std::string& tcp_status) {
  char line[320];
  out << "tierkv bench redis: redis-server " << version << " on 127.0.0.1 (no persistence), "
      << options.connections << " connections (one thread each), pipelines of " << options.batch
      << " GETs; tierkv: master + store processes, shm and tcp requesters, batch " << options.batch
      << "; " << FormatBytes(options.working_set_bytes) << " per size, median of "
      << options.common.reps << " rep" << (options.common.reps == 1 ? "" : "s") << "\n";
  out << "  redis GB/s is Redis at its best: per rep the fastest of hiredis readers, raw RESP "
         "readers (values received straight into place) and redis-benchmark\n";
  std::snprintf(line, sizeof(line), "  %10s %8s %11s %8s %8s %10s %12s %12s %9s %9s\n", "object",
                "objects", "redis GB/s", "hiredis", "raw", "redis-bm", "tierkv shm", "tierkv tcp",
                "shm/redis", "tcp/redis");
  out << line;
  for (const RedisSizeResult& r : results) {
    std::snprintf(line, sizeof(line), "  %10s %8zu %11.2f %8.2f %8.2f %10s %12.2f %12s %9.2f %9s\n",
                  FormatBytes(r.object_bytes).c_str(), r.objects, r.redis_gbps, r.hiredis_gbps,
                  r.raw_gbps, Figure(r.tool_gbps).c_str(), r.shm_get_gbps,
                  Figure(r.tcp_get_gbps).c_str(), r.shm_ratio(), Figure(r.tcp_ratio()).c_str());
    out << line;
    if (!r.tool_gbps) out << "  (" << r.tool_detail << ")\n";
  }
  if (!tcp_status.empty()) out << "  tcp transport: " << tcp_status << "\n";
  auto verdict = [](double ratio, double target) { return ratio >= target ? "PASS" : "FAIL"; };
  std::string tcp = "not available";
  if (summary.tcp_ratio()) {
    std::snprintf(line, sizeof(line), "%.2f x redis (target >= %.1f: %s)", *summary.tcp_ratio(),
                  kTcpVsRedisTarget, verdict(*summary.tcp_ratio(), kTcpVsRedisTarget));
    tcp = line;
  }
  std::snprintf(line, sizeof(line),
                "%s objects: tierkv shm get = %.2f x redis (target >= %.1f: %s); tcp get = %s\n",
                FormatBytes(summary.object_bytes).c_str(), summary.shm_ratio(), kShmVsRedisTarget,
                verdict(summary.shm_ratio(), kShmVsRedisTarget), tcp.c_str());
  out << line << std::flush;
}

}  // namespace

Status RunRedisBench(const RedisBenchOptions& options) {
  if (Status s = ValidateTransferOptions(options.common, options.working_set_bytes,
                                         options.object_sizes, options.batch, options.pieces);
      !s.ok()) {
    return s;
  }
  if (options.connections < 1)
    return Status(ErrorCode::INVALID_PARAMS, "--connections must be >= 1");
  Result<Config> loaded = LoadConfig(options.common.config_path);
  if (!loaded.ok()) return loaded.status();
  const Config base = std::move(loaded).value();
  const uint64_t largest = LargestWorkingSet(options.working_set_bytes, options.object_sizes);
  const uint64_t segment_bytes = SegmentBytesFor(largest);

  Progress progress("redis", options.common.progress);
  if (Status s = EnsureRedisServer(&progress); !s.ok()) return s;

  Result<TransferBuffers> buffers = AllocateTransferBuffers(largest, kRemotePatternSeed, progress);
  if (!buffers.ok()) return buffers.status();
  AlignedBuffer* src = &buffers->src;
  AlignedBuffer* dst = &buffers->dst;

  progress.Update("starting redis-server");
  Result<std::unique_ptr<RedisServer> > redis_started = RedisServer::Start();
  if (!redis_started.ok()) return redis_started.status();
  std::unique_ptr<RedisServer> redis = std::move(redis_started).value();
  Result<RedisConnection> loader = Connect(redis->port(), std::chrono::seconds(5));
  if (!loader.ok()) return loader.status();
  std::string version = "?";
  if (Result<std::string> info = Command(loader->get(), {"INFO", "server"}); info.ok()) {
    const size_t at = info->find("redis_version:");
    if (at != std::string::npos) {
      version = info->substr(at + 14, info->find_first_of("\r\n", at) - at - 14);
    }
  }
  std::vector<Reader> readers(options.connections);
  for (Reader& reader : readers) {
    Result<RedisConnection> c = Connect(redis->port(), std::chrono::seconds(5));
    if (!c.ok()) return c.status();
    reader.connection = std::move(c).value();
    reader.connection->reader->fn = &g_sink_functions;
    reader.connection->reader->maxbuf = 0;  // keep the read buffer between replies
  }
  std::vector<RawRespReader> raw_readers;
  for (size_t t = 0; t < options.connections; ++t) {
    Result<RawRespReader> c = RawRespReader::Connect(redis->port());
    if (!c.ok()) return c.status();
    raw_readers.push_back(std::move(c).value());
  }

  // The store's segment on 2 MiB pages (fio_runner.h: ReserveSegmentHugePages), unless asked
  // for 4 KiB pages.
  const std::unique_ptr<HugetlbReservation> segment_pages =
      options.small_pages ? nullptr : ReserveSegmentHugePages(segment_bytes);
  progress.Update("starting tierkv master and tierkv store (segment " + FormatBytes(segment_bytes) +
                  ")");
  Result<RemoteRun> started =
      RemoteRun::Start(base, segment_bytes, options.small_pages, *src, *dst);
  if (!started.ok()) return started.status();
  RemoteRun run = std::move(started).value();
  Client* const shm = run.clients.shm.get();
  Client* const tcp = run.clients.tcp.get();
  const std::string tcp_status = run.clients.tcp_status;

  std::vector<RedisSizeResult> results;
  const int reps = options.common.reps;
  for (uint64_t size : options.object_sizes) {
    TransferWorkload workload("redis", size, ObjectsFor(options.working_set_bytes, size),
                              options.batch, options.pieces, *src, *dst);
    const size_t n = workload.objects();
    for (size_t t = 0; t < readers.size(); ++t) {
      readers[t].first = n * t / readers.size();
      readers[t].end = n * (t + 1) / readers.size();
    }
    progress.Update(FormatBytes(size) + " x " + std::to_string(n) + ": SET into redis");
    if (Status s = Load(loader->get(), workload, options.batch); !s.ok()) return s;

    std::vector<double> redis_gbps, hiredis_gbps, raw_gbps, tool_gbps, shm_get, shm_put, tcp_get,
        tcp_put, memcpy_gbps;
    RedisSizeResult r;
    for (int rep = 0; rep < reps; ++rep) {
      const std::string where = FormatBytes(size) + " x " + std::to_string(n) + ", rep " +
                                std::to_string(rep + 1) + "/" + std::to_string(reps);
      progress.Update(where + ": tierkv shm put, get");
      if (Status s = ClientRep(*shm, workload, rep, &shm_put, &shm_get); !s.ok()) return s;
      if (tcp != nullptr) {
        progress.Update(where + ": tierkv tcp put, get");
        if (Status s = ClientRep(*tcp, workload, rep, &tcp_put, &tcp_get); !s.ok()) return s;
      }
      progress.Update(where + ": memcpy");
      Result<double> copy = workload.Memcpy(rep);
      if (!copy.ok()) return copy.status();
      memcpy_gbps.push_back(Gbps(workload.total_bytes(), *copy));
      progress.Update(where + ": redis GET x " + std::to_string(readers.size()) +
                      " connections (hiredis, raw RESP, redis-benchmark)");
      Result<double> redis_seconds = TimedRedisGet(readers, workload, options.batch, rep);
      if (!redis_seconds.ok()) return redis_seconds.status();
      hiredis_gbps.push_back(Gbps(workload.total_bytes(), *redis_seconds));
      Result<double> raw_seconds = TimedRawGet(raw_readers, readers, workload, options.batch, rep);
      if (!raw_seconds.ok()) return raw_seconds.status();
      raw_gbps.push_back(Gbps(workload.total_bytes(), *raw_seconds));
      double best = std::max(hiredis_gbps.back(), raw_gbps.back());
      Result<RedisBenchmarkRun> tool =
          RunRedisBenchmarkTool(redis->port(), size, std::max<size_t>(n, 64), options.connections,
                                options.batch, redis->dir());
      if (!tool.ok()) return tool.status();
      if (tool->available) {
        tool_gbps.push_back(tool->gbps);
        best = std::max(best, tool->gbps);
      }
      r.tool_detail = tool->detail;
      redis_gbps.push_back(best);
      r.shm_ratios.push_back(best > 0 ? shm_get.back() / best : 0);
      if (tcp != nullptr) r.tcp_ratios.push_back(best > 0 ? tcp_get.back() / best : 0);
    }
    if (Result<std::string> flushed = Command(loader->get(), {"FLUSHALL"}); !flushed.ok()) {
      return flushed.status();
    }

    r.object_bytes = size;
    r.objects = n;
    r.redis_gbps = Median(redis_gbps);
    r.hiredis_gbps = Median(hiredis_gbps);
    r.raw_gbps = Median(raw_gbps);
    if (!tool_gbps.empty()) r.tool_gbps = Median(tool_gbps);
    r.shm_get_gbps = Median(shm_get);
    r.shm_put_gbps = Median(shm_put);
    r.memcpy_gbps = Median(memcpy_gbps);
    if (tcp != nullptr) r.tcp_get_gbps = Median(tcp_get);
    results.push_back(r);
    if (options.common.json) {
      nlohmann::ordered_json line;
      line["bench"] = "redis";
      line["op"] = "get";
      line["object_bytes"] = size;
      line["objects"] = n;
      line["batch"] = options.batch;
      line["connections"] = options.connections;
      line["reps"] = reps;
      line["redis_gbps"] = Round3(r.redis_gbps);
      line["redis_hiredis_gbps"] = Round3(r.hiredis_gbps);
      line["redis_raw_gbps"] = Round3(r.raw_gbps);
      line["redis_benchmark_gbps"] = OrNull(r.tool_gbps);
      line["redis_benchmark"] = r.tool_detail;
      line["shm_get_gbps"] = Round3(r.shm_get_gbps);
      line["tcp_get_gbps"] = OrNull(r.tcp_get_gbps);
      line["memcpy_gbps"] = Round3(r.memcpy_gbps);
      line["shm_ratio_vs_redis"] = Round3(r.shm_ratio());
      line["tcp_ratio_vs_redis"] = OrNull(r.tcp_ratio());
      line["shm_ratio_min"] = Round3(*std::min_element(r.shm_ratios.begin(), r.shm_ratios.end()));
      line["shm_ratio_max"] = Round3(*std::max_element(r.shm_ratios.begin(), r.shm_ratios.end()));
      if (!r.tcp_ratios.empty()) {
        line["tcp_ratio_min"] = Round3(*std::min_element(r.tcp_ratios.begin(), r.tcp_ratios.end()));
        line["tcp_ratio_max"] = Round3(*std::max_element(r.tcp_ratios.begin(), r.tcp_ratios.end()));
      }
      std::cout << line.dump() << '\n' << std::flush;
    }
  }

  progress.Update("stopping tierkv and redis-server");
  const Status cluster_stopped = run.Stop(*src, *dst);
  for (Reader& reader : readers) reader.connection.reset();
  raw_readers.clear();
  loader->reset();
  redis->Stop();
  progress.Done();
  if (!cluster_stopped.ok()) return cluster_stopped;

  RedisSizeResult summary = results.front();
  for (const RedisSizeResult& r : results) {
    if (r.object_bytes == 2 * kMiB) summary = r;
  }
  if (options.common.json) {
    nlohmann::ordered_json line;
    line["bench"] = "redis";
    line["object_bytes"] = summary.object_bytes;
    line["redis_gbps"] = Round3(summary.redis_gbps);
    line["redis_hiredis_gbps"] = Round3(summary.hiredis_gbps);
    line["redis_raw_gbps"] = Round3(summary.raw_gbps);
    line["redis_benchmark_gbps"] = OrNull(summary.tool_gbps);
    line["shm_get_gbps"] = Round3(summary.shm_get_gbps);
    line["tcp_get_gbps"] = OrNull(summary.tcp_get_gbps);
    line["shm_ratio_vs_redis"] = Round3(summary.shm_ratio());
    line["tcp_ratio_vs_redis"] = OrNull(summary.tcp_ratio());
    line["memcpy_gbps"] = Round3(summary.memcpy_gbps);
    line["shm_put_gbps"] = Round3(summary.shm_put_gbps);
    line["connections"] = options.connections;
    line["batch"] = options.batch;
    line["redis_version"] = version;
    line["tcp_status"] = tcp_status.empty() ? "OK" : tcp_status;
    line["shm_target"] = kShmVsRedisTarget;
    line["tcp_target"] = kTcpVsRedisTarget;
    std::cout << line.dump() << '\n' << std::flush;
  }
  PrintHuman(options.common.json ? std::cerr : std::cout, options, version, results, summary,
             tcp_status);
  return Status::Ok();
}

#endif  // TIERKV_HAVE_HIREDIS

}  // namespace tierkv::bench
