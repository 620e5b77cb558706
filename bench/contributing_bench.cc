#include "contributing_bench.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/exec_args.h"
#include "rpc/master_process.h"
#include "tcp_stream.h"
#include "tierkv/client.h"
#include "tierkv/config.h"
#include "workload.h"

namespace tierkv::bench {
namespace {

constexpr const char* kWorkerReply = "@@ ";  // worker answers start so; other stdout lines are logs

// ---- The worker ---------------------------------------------------------------------------

std::string WorkerReply(const std::string& what) { return std::string(kWorkerReply) + what + "\n"; }

}  // namespace

int RunContributingWorker(const std::string& master, size_t index, uint64_t segment_bytes,
                          uint64_t buffer_bytes, size_t batch, size_t pieces,
                          const std::string& config_path) {
  auto fail = [](const std::string& why) {
    std::cout << WorkerReply("error " + why) << std::flush;
    return 1;
  };
  Result<Config> loaded = LoadConfig(config_path);
  if (!loaded.ok()) return fail(loaded.status().ToString());
  Config config = std::move(loaded).value();
  config.mode = Mode::kEmbedded;
  config.master_server_address = master;
  config.global_segment_size = segment_bytes;
  config.local_hostname = "127.0.0.1";
  config.protocol = "tcp";
  auto created = Client::Create(config);
  if (!created.ok()) return fail(created.status().ToString());
  std::unique_ptr<Client> client = std::move(created).value();
  auto src = AlignedBuffer::Allocate(buffer_bytes);
  auto dst = AlignedBuffer::Allocate(buffer_bytes);
  if (!src.ok() || !dst.ok()) return fail("cannot allocate " + FormatBytes(buffer_bytes));
  FillPattern(src->data(), src->size(), kRemotePatternSeed + index);
  std::memset(dst->data(), 0, dst->size());
  for (AlignedBuffer* b : {&*src, &*dst}) {
    if (Status st = client->RegisterBuffer(b->data(), b->size()); !st.ok()) {
      return fail(st.ToString());
    }
  }
  const std::string own = client->LocalSegmentName();
  std::cout << WorkerReply("ready " + own.substr(0, own.find('@'))) << std::flush;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string op;
    uint64_t object_bytes = 0;
    size_t objects = 0;
    in >> op >> object_bytes >> objects;
    if (op == "exit") break;
    if (object_bytes == 0 || objects == 0 || objects * object_bytes > buffer_bytes) {
      std::cout << WorkerReply("error bad command: " + line) << std::flush;
      continue;
    }
    TransferWorkload workload("contributing-w" + std::to_string(index), object_bytes, objects,
                              batch, pieces, *src, *dst);
    Result<double> seconds = 0.0;
    if (op == "put") {
      ReplicateConfig placement;
      in >> placement.preferred_segment;
      seconds = workload.Put(*client, placement);
    } else if (op == "get") {
      int rep = 0;
      in >> rep;
      seconds = workload.Get(*client, rep);
    } else if (op == "remove") {
      std::vector<std::string> keys;
      for (size_t i = 0; i < objects; ++i) keys.push_back(workload.key(i));
      size_t failed = 0;
      for (int code : client->BatchRemove(keys, /*force=*/true)) failed += code != 0;
      if (failed != 0) seconds = Failed(std::to_string(failed) + " removes failed");
    } else {
      seconds = Failed("unknown command: " + line);
    }
    if (!seconds.ok()) {
      std::cout << WorkerReply("error " + seconds.status().ToString()) << std::flush;
    } else {
      char text[64];
      std::snprintf(text, sizeof(text), "ok %.9f", *seconds);
      std::cout << WorkerReply(text) << std::flush;
    }
  }
  for (AlignedBuffer* b : {&*src, &*dst}) (void)client->UnregisterBuffer(b->data());
  return 0;
}

namespace {

// ---- The parent's side of a worker ----------------------------------------------------------

class EngineProcess {
 public:
  static Result<std::unique_ptr<EngineProcess>> Start(const std::vector<std::string>& args) {
    const std::string self = SelfExecutable();
    if (self.empty()) return Failed("cannot read /proc/self/exe");
    int to_child[2], from_child[2];
    if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0) {
      return Failed(std::string("pipe2: ") + std::strerror(errno));
    }
    std::vector<std::string> storage = {self, "bench", "contributing-worker"};
    storage.insert(storage.end(), args.begin(), args.end());
    // Built before fork (the child may not allocate); the log level unless the user set one.
    const char* level = std::getenv("TIERKV_LOG_LEVEL");
    const ExecArgs exec(std::move(storage),
                        {{"TIERKV_LOG_LEVEL", level != nullptr ? level : "warn"}});
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) return Failed(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      if (dup2(to_child[0], STDIN_FILENO) < 0 || dup2(from_child[1], STDOUT_FILENO) < 0) {
        _exit(127);
      }
      exec.Exec();
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    std::unique_ptr<EngineProcess> w(new EngineProcess());
    w->pid_ = pid;
    w->in_ = fdopen(to_child[1], "w");
    w->out_ = fdopen(from_child[0], "r");
    Result<std::string> ready = w->Read();
    if (!ready.ok()) return ready.status();
    if (ready->rfind("ready ", 0) != 0) return Failed("worker did not start: " + *ready);
    w->segment_ = ready->substr(6);
    return w;
  }
  ~EngineProcess() {
    if (in_ != nullptr) fclose(in_);
    if (out_ != nullptr) fclose(out_);
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }
  const std::string& segment() const { return segment_; }
  Status Send(const std::string& command) {
    if (std::fputs((command + "\n").c_str(), in_) < 0 || std::fflush(in_) != 0) {
      return Failed("worker " + segment_ + " is gone (sending '" + command + "')");
    }
    return Status::Ok();
  }
  // The seconds of an "ok" answer, else the worker's error.
  Result<double> Answer() {
    Result<std::string> line = Read();
    if (!line.ok()) return line.status();
    if (line->rfind("ok ", 0) != 0) return Failed("worker " + segment_ + ": " + *line);
    return std::stod(line->substr(3));
  }
  Status Stop() {
    (void)Send("exit");
    fclose(in_);
    in_ = nullptr;
    int wstatus = 0;
    pid_t reaped;
    while ((reaped = waitpid(pid_, &wstatus, 0)) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    if (reaped < 0 || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
      return Failed("worker " + segment_ + " did not exit cleanly (status " +
                    std::to_string(wstatus) + ")");
    }
    return Status::Ok();
  }

 private:
  EngineProcess() = default;
  // The next "@@ " line, without the prefix.
  Result<std::string> Read() {
    char buf[4096];
    while (std::fgets(buf, sizeof(buf), out_) != nullptr) {
      std::string line(buf);
      while (!line.empty() && line.back() == '\n') line.pop_back();
      if (line.rfind(kWorkerReply, 0) == 0) return line.substr(std::strlen(kWorkerReply));
    }
    return Failed("worker " + segment_ + " ended without answering");
  }
  pid_t pid_ = -1;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
  std::string segment_;
};

struct ProcessFigures {
  std::vector<double> per_process, aggregate;
};

// One op on every worker at once: the per-process median and the aggregate GB/s.
Status RunOnEveryProcess(std::vector<std::unique_ptr<EngineProcess>>& workers,
                         const std::vector<std::string>& commands, uint64_t bytes_each,
                         ProcessFigures* out) {
  for (size_t i = 0; i < workers.size(); ++i) {
    if (Status st = workers[i]->Send(commands[i]); !st.ok()) return st;
  }
  std::vector<double> gbps;
  double slowest = 0;
  for (auto& w : workers) {
    Result<double> seconds = w->Answer();
    if (!seconds.ok()) return seconds.status();
    gbps.push_back(Gbps(bytes_each, *seconds));
    slowest = std::max(slowest, *seconds);
  }
  out->per_process.push_back(Median(gbps));
  out->aggregate.push_back(Gbps(bytes_each * workers.size(), slowest));
  return Status::Ok();
}

}  // namespace

Status RunContributingBench(const RemoteBenchOptions& options, size_t workers_n) {
  if (workers_n < 2) return Failed("--contributing needs at least 2 processes");
  if (Status s = ValidateTransferOptions(options.common, options.working_set_bytes,
                                         options.object_sizes, options.batch, options.pieces);
      !s.ok()) {
    return s;
  }
  const uint64_t largest = LargestWorkingSet(options.working_set_bytes, options.object_sizes);
  // A worker's segment holds its neighbour's working set (and room to spare, as the store's).
  const uint64_t segment_bytes = SegmentBytesFor(largest);
  Progress progress("remote", options.common.progress);
  progress.Update("starting the raw TCP sender (a forked child)");
  Result<std::unique_ptr<TcpStream>> stream_started = TcpStream::Start(largest);
  if (!stream_started.ok()) return stream_started.status();
  std::unique_ptr<TcpStream> stream = std::move(stream_started).value();
  Result<TransferBuffers> buffers = AllocateTransferBuffers(largest, kRemotePatternSeed, progress);
  if (!buffers.ok()) return buffers.status();

  progress.Update("starting tierkv master");
  MasterProcessOptions master_options;
  master_options.binary = SelfExecutable();
  master_options.args = {"--host", "127.0.0.1", "--port", "0", "--metrics-port", "-1"};
  master_options.env = {{"TIERKV_LOG_LEVEL", "warn"}};
  Result<std::unique_ptr<MasterProcess>> master = MasterProcess::Start(master_options);
  if (!master.ok()) return master.status();

  std::vector<std::unique_ptr<EngineProcess>> workers;
  for (size_t i = 0; i < workers_n; ++i) {
    progress.Update("starting engine process " + std::to_string(i + 1) + "/" +
                    std::to_string(workers_n) + " (segment " + FormatBytes(segment_bytes) + ")");
    auto w = EngineProcess::Start(
        {(*master)->address(), std::to_string(i), std::to_string(segment_bytes),
         std::to_string(largest), std::to_string(options.batch), std::to_string(options.pieces),
         options.common.config_path.empty() ? "-" : options.common.config_path});
    if (!w.ok()) return w.status();
    workers.push_back(std::move(w).value());
  }

  char line[256];
  std::ostream& human = options.common.json ? std::cerr : std::cout;
  std::ostringstream table;
  for (uint64_t size : options.object_sizes) {
    const size_t objects = ObjectsFor(options.working_set_bytes, size);
    TransferWorkload baseline("contributing-raw", size, objects, options.batch, options.pieces,
                              buffers->src, buffers->dst);
    const std::string shape = std::to_string(size) + " " + std::to_string(objects);
    ProcessFigures put, get;
    std::vector<double> raw;
    for (int rep = 0; rep < options.common.reps; ++rep) {
      progress.Update(FormatBytes(size) + " rep " + std::to_string(rep + 1) +
                      ": put, get, raw TCP");
      std::vector<std::string> puts, gets, removes;
      for (size_t i = 0; i < workers.size(); ++i) {
        puts.push_back("put " + shape + " " + workers[(i + 1) % workers.size()]->segment());
        gets.push_back("get " + shape + " " + std::to_string(rep));
        removes.push_back("remove " + shape);
      }
      const uint64_t bytes_each = size * objects;
      if (Status st = RunOnEveryProcess(workers, puts, bytes_each, &put); !st.ok()) return st;
      if (Status st = RunOnEveryProcess(workers, gets, bytes_each, &get); !st.ok()) return st;
      ProcessFigures ignored;
      if (Status st = RunOnEveryProcess(workers, removes, bytes_each, &ignored); !st.ok())
        return st;
      Result<double> seconds = stream->Receive(baseline, rep, TcpStream::Mode::kBulk);
      if (!seconds.ok()) return seconds.status();
      raw.push_back(Gbps(bytes_each, *seconds));
    }
    const double raw_gbps = Median(raw);
    for (const auto& [op, figures] : {std::pair<const char*, ProcessFigures*>{"put", &put},
                                      std::pair<const char*, ProcessFigures*>{"get", &get}}) {
      const double per = Median(figures->per_process), agg = Median(figures->aggregate);
      if (options.common.json) {
        nlohmann::ordered_json j;
        j["bench"] = "remote";
        j["mode"] = "contributing";
        j["processes"] = workers.size();
        j["transport"] = "tcp";
        j["op"] = op;
        j["object_bytes"] = size;
        j["objects_per_process"] = objects;
        j["batch"] = options.batch;
        j["pieces"] = options.pieces;
        j["reps"] = options.common.reps;
        j["gbps_per_process"] = Round3(per);
        j["gbps_aggregate"] = Round3(agg);
        j["baseline"] = "tcp_raw";
        j["baseline_gbps"] = Round3(raw_gbps);
        j["ratio_per_process"] = Round3(raw_gbps > 0 ? per / raw_gbps : 0);
        j["ratio_aggregate"] = Round3(raw_gbps > 0 ? agg / raw_gbps : 0);
        std::cout << j.dump() << '\n' << std::flush;
      }
      std::snprintf(line, sizeof(line), "  %-4s %10s %8zu %12.2f %10.2f %9.2f %8.2f %8.2f\n", op,
                    FormatBytes(size).c_str(), objects, per, agg, raw_gbps,
                    raw_gbps > 0 ? per / raw_gbps : 0, raw_gbps > 0 ? agg / raw_gbps : 0);
      table << line;
    }
  }
  progress.Update("stopping the engine processes, the master and the TCP sender");
  Status stopped = Status::Ok();
  for (auto& w : workers) {
    if (Status st = w->Stop(); !st.ok() && stopped.ok()) stopped = st;
  }
  (*master)->Stop();
  if (Status st = stream->Stop(); !st.ok() && stopped.ok()) stopped = st;
  progress.Done();
  if (!stopped.ok()) return stopped;
  human << "tierkv bench remote --contributing " << workers.size() << ": " << workers.size()
        << " engine processes each contributing a " << FormatBytes(segment_bytes)
        << " segment to a tierkv master on 127.0.0.1 (protocol tcp); process i writes to and "
           "reads from process i+1's segment, all at once; "
        << FormatBytes(options.working_set_bytes) << " per process and size, batch "
        << options.batch << ", " << options.pieces << " buffers per object, median of "
        << options.common.reps << " reps; baseline: one raw loopback TCP stream\n";
  std::snprintf(line, sizeof(line), "  %-4s %10s %8s %12s %10s %9s %8s %8s\n", "op", "object",
                "objects", "GB/s/process", "GB/s all", "raw TCP", "ratio", "ratio all");
  human << line << table.str() << std::flush;
  return Status::Ok();
}

}  // namespace tierkv::bench
