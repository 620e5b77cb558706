// An argv and an environment made ready before fork(), so that the child runs only
// async-signal-safe calls (dup2, execve, _exit) until exec. A child forked from a
// multi-threaded process must not allocate or call setenv: another thread may have held the
// allocator's lock at the fork (ASan's allocator is not reset in the child), and the child
// would hang before exec.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tierkv {

class ExecArgs {
 public:
  // `args[0]` is the program's path. The environment is this process's, with each of
  // `overrides` (NAME, VALUE) replacing or adding NAME.
  ExecArgs(std::vector<std::string> args,
           const std::vector<std::pair<std::string, std::string>>& overrides = {});
  ExecArgs(const ExecArgs&) = delete;
  ExecArgs& operator=(const ExecArgs&) = delete;

  const char* path() const { return argv_[0]; }  // nullptr when `args` is empty
  char* const* argv() const { return argv_.data(); }
  char* const* envp() const { return envp_.data(); }

  // execve(path, argv, envp): returns only on failure. Async-signal-safe.
  void Exec() const;

 private:
  std::vector<std::string> args_;
  std::vector<std::string> env_;
  std::vector<char*> argv_;
  std::vector<char*> envp_;
};

}  // namespace tierkv
