#include "subprocess.h"

#include <dirent.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <thread>
#include <utility>

#include <fmt/format.h>

extern char** environ;

namespace agentd::detail {

namespace {

// How often wait_for() looks again; it bounds how late an exit is noticed, nothing else.
constexpr auto kWaitPollInterval = std::chrono::milliseconds(2);

// RAII for the posix_spawn attribute objects (their destroy calls cannot fail).
struct FileActions {
  posix_spawn_file_actions_t actions;
  FileActions() { posix_spawn_file_actions_init(&actions); }
  ~FileActions() { posix_spawn_file_actions_destroy(&actions); }
  FileActions(const FileActions&) = delete;
  FileActions& operator=(const FileActions&) = delete;
};

struct SpawnAttr {
  posix_spawnattr_t attr;
  SpawnAttr() { posix_spawnattr_init(&attr); }
  ~SpawnAttr() { posix_spawnattr_destroy(&attr); }
  SpawnAttr(const SpawnAttr&) = delete;
  SpawnAttr& operator=(const SpawnAttr&) = delete;
};

// fd moved to a number above the standard streams (close-on-exec), so that setting up the
// child's 0..2 never overwrites it when this process runs with one of them closed.
kj::AutoCloseFd above_stdio(kj::AutoCloseFd fd) {
  if (fd.get() > STDERR_FILENO) return fd;
  int moved = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  if (moved < 0) throw std::system_error(errno, std::generic_category(), "cannot create pipes");
  return kj::AutoCloseFd(moved);
}

// A pipe for target (0, 1 or 2): the child's end is duplicated onto target by actions; returns
// this process's end. Both ends are close-on-exec here (dup2 clears it on the child's copy).
kj::AutoCloseFd add_pipe(FileActions& fa, int target, std::vector<kj::AutoCloseFd>& child_ends) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw std::system_error(errno, std::generic_category(), "cannot create pipes");
  kj::AutoCloseFd read_end(fds[0]), write_end(fds[1]);
  read_end = above_stdio(std::move(read_end));
  write_end = above_stdio(std::move(write_end));
  bool child_reads = target == STDIN_FILENO;
  auto& child_end = child_reads ? read_end : write_end;
  posix_spawn_file_actions_adddup2(&fa.actions, child_end.get(), target);
  child_ends.push_back(std::move(child_end));
  return std::move(child_reads ? write_end : read_end);
}

// The file execvp would run for program (no '/' in it), searched on this process's PATH; empty
// when there is none. Done before fork: the child may only make async-signal-safe calls.
std::string find_on_path(const std::string& program) {
  const char* path = ::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  for (;;) {
    std::size_t end = dirs.find(':', start);
    std::string dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    std::string file = (dir.empty() ? std::string(".") : dir) + "/" + program;
    struct stat st {};
    if (::stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(file.c_str(), X_OK) == 0)
      return file;
    if (end == std::string::npos) return {};
    start = end + 1;
  }
}

// What the child does to one of its streams between fork and exec.
struct ChildStream {
  int target;
  int dup_from = -1;      // dup2(dup_from, target)
  std::string open_path;  // or open(open_path, open_flags, 0600) onto target
  int open_flags = 0;
};

// The argv and environment arrays exec and posix_spawn take, pointing into options (which
// outlives them): the caller's environment when options.env is not set.
class ExecArgs {
 public:
  explicit ExecArgs(const SpawnOptions& options) {
    for (const auto& a : options.argv) argv_.push_back(const_cast<char*>(a.c_str()));
    argv_.push_back(nullptr);
    if (options.env) {
      for (const auto& e : *options.env) envp_.push_back(const_cast<char*>(e.c_str()));
      envp_.push_back(nullptr);
    }
  }
  char* const* argv() const { return argv_.data(); }
  // Empty only without options.env (a given one ends with its nullptr).
  char* const* envp() const { return envp_.empty() ? environ : envp_.data(); }

 private:
  std::vector<char*> argv_;
  std::vector<char*> envp_;
};

// The die_with_parent path (see the header): fork, then in the child only async-signal-safe
// calls: process group, death signal, signal mask, cwd, streams, exec. An exec failure comes
// back to the parent as its errno through a close-on-exec pipe.
Subprocess spawn_forked(const SpawnOptions& options, Subprocess& child, std::vector<ChildStream>& streams,
                        std::vector<kj::AutoCloseFd>& child_ends, pid_t& pid_out) {
  const std::string& program = options.argv[0];
  std::string file = program.find('/') == std::string::npos ? find_on_path(program) : program;
  if (file.empty()) throw SpawnError(program, ENOENT);

  const ExecArgs exec_args(options);
  char* const* argv = exec_args.argv();
  char* const* env = exec_args.envp();

  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0)
    throw std::system_error(errno, std::generic_category(), "cannot create pipes");
  kj::AutoCloseFd report_read(report[0]), report_write(report[1]);

  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw std::system_error(errno, std::generic_category(), "cannot fork");
  if (pid == 0) {
    auto fail = [&](int error) {
      (void)!::write(report_write.get(), &error, sizeof error);
      ::_exit(127);
    };
    ::setpgid(0, 0);
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(errno);
    if (::getppid() != parent) ::_exit(127);  // the parent went before the death signal was set
    if (options.clear_signal_mask) {
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
    }
    if (!options.cwd.empty() && ::chdir(options.cwd.c_str()) != 0) fail(errno);
    for (const ChildStream& s : streams) {
      int from = s.dup_from;
      if (!s.open_path.empty()) {
        from = ::open(s.open_path.c_str(), s.open_flags | O_CLOEXEC, 0600);
        if (from < 0) fail(errno);
      }
      if (from >= 0 && ::dup2(from, s.target) < 0) fail(errno);
    }
    ::execve(file.c_str(), argv, env);
    fail(errno);
  }
  report_write = nullptr;
  child_ends.clear();  // the child has its copies
  pid_out = pid;
  int error = 0;
  ssize_t n;
  do n = ::read(report_read.get(), &error, sizeof error);
  while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof error)) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    throw SpawnError(program, error);
  }
  return std::move(child);
}

}  // namespace

SpawnError::SpawnError(std::string program, int error)
    : std::runtime_error(fmt::format("cannot start '{}': {}", program, std::strerror(error))),
      program_(std::move(program)),
      error_(error) {}

Subprocess Subprocess::spawn(const SpawnOptions& options) {
  if (options.argv.empty()) throw std::invalid_argument("Subprocess::spawn: empty argv");
  if (options.in.kind == Redirect::Kind::append_to || options.in.kind == Redirect::Kind::to_stdout)
    throw std::invalid_argument("Subprocess::spawn: stdin can only be inherited, a pipe or null");
  if (options.out.kind == Redirect::Kind::to_stdout)
    throw std::invalid_argument("Subprocess::spawn: only stderr can go to stdout");

  Subprocess child;
  FileActions fa;
  std::vector<kj::AutoCloseFd> child_ends;  // closed here once the child has its copies
  std::vector<ChildStream> streams;         // the same actions, for the fork path
  auto redirect = [&](const Redirect& r, int target) {
    switch (r.kind) {
      case Redirect::Kind::inherit:
        break;
      case Redirect::Kind::pipe: {
        auto mine = add_pipe(fa, target, child_ends);
        streams.push_back({target, child_ends.back().get(), {}, 0});
        (target == STDIN_FILENO    ? child.stdin_
         : target == STDOUT_FILENO ? child.stdout_
                                   : child.stderr_) = std::move(mine);
        break;
      }
      case Redirect::Kind::null:
        posix_spawn_file_actions_addopen(&fa.actions, target, "/dev/null",
                                         target == STDIN_FILENO ? O_RDONLY : O_WRONLY, 0);
        streams.push_back({target, -1, "/dev/null", target == STDIN_FILENO ? O_RDONLY : O_WRONLY});
        break;
      case Redirect::Kind::append_to:
        posix_spawn_file_actions_addopen(&fa.actions, target, r.path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                         0600);
        streams.push_back({target, -1, r.path, O_WRONLY | O_CREAT | O_APPEND});
        break;
      case Redirect::Kind::to_stdout:
        posix_spawn_file_actions_adddup2(&fa.actions, STDOUT_FILENO, target);
        streams.push_back({target, STDOUT_FILENO, {}, 0});
        break;
    }
  };
  redirect(options.in, STDIN_FILENO);
  redirect(options.out, STDOUT_FILENO);
  redirect(options.err, STDERR_FILENO);

  if (options.die_with_parent) {
    pid_t pid = -1;
    Subprocess forked = spawn_forked(options, child, streams, child_ends, pid);
    forked.pid_ = pid;
    forked.group_ = Group::owned_killed;
    return forked;
  }
  if (!options.cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa.actions, options.cwd.c_str());

  SpawnAttr sa;
  short flags = 0;
  if (options.new_session) flags |= POSIX_SPAWN_SETSID;
  if (options.clear_signal_mask) {
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&sa.attr, &none);
    flags |= POSIX_SPAWN_SETSIGMASK;
  }
  posix_spawnattr_setflags(&sa.attr, flags);

  const ExecArgs exec_args(options);
  char* const* argv = exec_args.argv();
  char* const* env = exec_args.envp();

  const std::string& program = options.argv[0];
  pid_t pid = -1;
  int rc = program.find('/') == std::string::npos
               ? ::posix_spawnp(&pid, program.c_str(), &fa.actions, &sa.attr, argv, env)
               : ::posix_spawn(&pid, program.c_str(), &fa.actions, &sa.attr, argv, env);
  if (rc != 0) throw SpawnError(program, rc);  // child holds no process: nothing to reap
  child.pid_ = pid;
  child.group_ = options.new_session ? Group::owned : Group::none;
  return child;
}

Subprocess::~Subprocess() {
  if (pid_ <= 0 || released_) return;
  // die_with_parent: what it started (npx -> node) goes too, also after the leader was reaped.
  if (group_ == Group::owned_killed) ::kill(-pid_, SIGKILL);
  if (!status_) {
    ::kill(pid_, SIGKILL);
    wait();
  }
}

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      released_(std::exchange(other.released_, false)),
      status_(std::exchange(other.status_, std::nullopt)),
      group_(std::exchange(other.group_, Group::none)),
      stdin_(std::move(other.stdin_)),
      stdout_(std::move(other.stdout_)),
      stderr_(std::move(other.stderr_)) {}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    Subprocess old(std::move(*this));  // its destructor disposes of the child held until now
    pid_ = std::exchange(other.pid_, -1);
    released_ = std::exchange(other.released_, false);
    status_ = std::exchange(other.status_, std::nullopt);
    group_ = std::exchange(other.group_, Group::none);
    stdin_ = std::move(other.stdin_);
    stdout_ = std::move(other.stdout_);
    stderr_ = std::move(other.stderr_);
  }
  return *this;
}

void Subprocess::require_process() const {
  if (pid_ <= 0 || released_)
    throw std::logic_error("Subprocess: no process to wait for (never started, moved or released)");
}

int Subprocess::wait() {
  require_process();
  while (!status_) {
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, 0);
    if (r == pid_)
      status_ = status;
    else if (r < 0 && errno != EINTR)
      status_ = 0;  // ECHILD: not ours to wait for (see the header)
  }
  return *status_;
}

std::optional<int> Subprocess::try_wait() {
  require_process();
  if (!status_) {
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_)
      status_ = status;
    else if (r < 0 && errno != EINTR)
      status_ = 0;
  }
  return status_;
}

std::optional<int> Subprocess::wait_for(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto status = try_wait()) return status;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(kWaitPollInterval);
  }
}

int Subprocess::terminate(std::chrono::milliseconds grace) {
  require_process();
  if (status_) return *status_;
  ::kill(pid_, SIGTERM);
  if (auto status = wait_for(grace)) return *status;
  ::kill(pid_, SIGKILL);
  return wait();
}

bool Subprocess::signal(int sig) {
  if (pid_ <= 0 || released_ || status_) return false;
  return ::kill(pid_, sig) == 0;
}

bool Subprocess::signal_group(int sig) {
  // After the leader's reap too: Linux does not hand out a pid again while a process group of
  // that id still has members, so -pid_ still names the child's group (or nothing: ESRCH).
  if (pid_ <= 0 || released_ || group_ == Group::none) return false;
  return ::kill(-pid_, sig) == 0;
}

pid_t Subprocess::release() {
  released_ = true;
  return pid_;
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {}", WTERMSIG(status));
  return "stopped";
}

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  return env;
}

std::size_t thread_count(pid_t pid) {
  std::string dir = pid == 0 ? std::string("/proc/self/task") : "/proc/" + std::to_string(pid) + "/task";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  std::size_t n = 0;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n;
}

}  // namespace agentd::detail
