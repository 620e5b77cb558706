// ExecArgs: the argv and environment a forked child execs with, built before the fork.
#include "common/exec_args.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

namespace tierkv {
namespace {

std::vector<std::string> Strings(char* const* list) {
  std::vector<std::string> out;
  for (; *list != nullptr; ++list) out.emplace_back(*list);
  return out;
}

int Count(const std::vector<std::string>& env, const std::string& prefix) {
  int n = 0;
  for (const std::string& e : env) n += e.rfind(prefix, 0) == 0 ? 1 : 0;
  return n;
}

TEST(ExecArgsTest, OverridesReplaceOrAddAndTheRestIsKept) {
  ASSERT_EQ(::setenv("TIERKV_EXEC_ARGS_KEPT", "k", 1), 0);
  ASSERT_EQ(::setenv("TIERKV_EXEC_ARGS_REPLACED", "old", 1), 0);
  ASSERT_EQ(::setenv("TIERKV_EXEC_ARGS_REPLACED_LONGER", "other", 1), 0);  // a longer name
  const ExecArgs exec({"/bin/true", "a", "b c"},
                      {{"TIERKV_EXEC_ARGS_REPLACED", "new"}, {"TIERKV_EXEC_ARGS_ADDED", "x=y"}});
  EXPECT_STREQ(exec.path(), "/bin/true");
  EXPECT_EQ(Strings(exec.argv()), (std::vector<std::string>{"/bin/true", "a", "b c"}));
  const std::vector<std::string> env = Strings(exec.envp());
  EXPECT_EQ(Count(env, "TIERKV_EXEC_ARGS_KEPT=k"), 1);
  EXPECT_EQ(Count(env, "TIERKV_EXEC_ARGS_REPLACED="), 1);
  EXPECT_EQ(Count(env, "TIERKV_EXEC_ARGS_REPLACED=new"), 1);
  EXPECT_EQ(Count(env, "TIERKV_EXEC_ARGS_REPLACED_LONGER=other"), 1);
  EXPECT_EQ(Count(env, "TIERKV_EXEC_ARGS_ADDED=x=y"), 1);
  ::unsetenv("TIERKV_EXEC_ARGS_KEPT");
  ::unsetenv("TIERKV_EXEC_ARGS_REPLACED");
  ::unsetenv("TIERKV_EXEC_ARGS_REPLACED_LONGER");
}

TEST(ExecArgsTest, TheChildSeesTheArgumentsAndTheEnvironment) {
  const ExecArgs exec(
      {"/bin/sh", "-c", "printf '%s|%s' \"$1\" \"$TIERKV_EXEC_ARGS_SEEN\"", "sh", "first arg"},
      {{"TIERKV_EXEC_ARGS_SEEN", "yes"}});
  int out[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    exec.Exec();
    ::_exit(127);
  }
  ::close(out[1]);
  std::string got;
  char buf[256];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof(buf))) > 0;) got.append(buf, n);
  ::close(out[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(got, "first arg|yes");
}

TEST(ExecArgsTest, AMissingProgramReturnsFromExec) {
  const ExecArgs exec({"/nonexistent/tierkv-exec-args-test"});
  exec.Exec();  // returns: execve failed
  EXPECT_EQ(errno, ENOENT);
  const ExecArgs empty({});
  EXPECT_EQ(empty.path(), nullptr);
  empty.Exec();  // no program: nothing to run, returns
}

}  // namespace
}  // namespace tierkv
