#include "common/exec_args.h"

#include <unistd.h>

#include <string_view>

extern char** environ;

namespace tierkv {

ExecArgs::ExecArgs(std::vector<std::string> args,
                   const std::vector<std::pair<std::string, std::string>>& overrides)
    : args_(std::move(args)) {
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    bool overridden = false;
    for (const auto& [name, value] : overrides) {
      if (entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 &&
          entry[name.size()] == '=') {
        overridden = true;
        break;
      }
    }
    if (!overridden) env_.emplace_back(entry);
  }
  for (const auto& [name, value] : overrides) env_.push_back(name + "=" + value);
  for (std::string& a : args_) argv_.push_back(a.data());
  argv_.push_back(nullptr);
  for (std::string& e : env_) envp_.push_back(e.data());
  envp_.push_back(nullptr);
}

void ExecArgs::Exec() const {
  if (argv_.size() > 1) ::execve(argv_[0], argv_.data(), envp_.data());
}

}  // namespace tierkv
