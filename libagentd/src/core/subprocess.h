// Subprocess: the one way agentd starts a program (child mode, `agentctl up`, the tests): a
// posix_spawn wrapper with per-stream redirection, the pipe ends as RAII descriptors, and the
// helpers that wait for, signal and reap the child. describe_wait_status() is the one place a
// wait status becomes text.
//
// Threads: spawn() may be called from any thread at once (every descriptor it creates is
// O_CLOEXEC, so a concurrent spawn never inherits another child's pipe end). A Subprocess object
// is used by one thread at a time. Waits are for this child's pid only (never waitpid(-1)), so
// other children of the process are left alone.
#pragma once

#include <kj/io.h>

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace agentd::detail {

// What one of the child's standard streams is connected to.
struct Redirect {
  enum class Kind {
    inherit,    // this process's own stream
    pipe,       // a new pipe; this process holds the other end (Subprocess::*_pipe())
    null,       // /dev/null
    append_to,  // stdout/stderr only: the file at path, opened O_APPEND, created 0600 if missing
    to_stdout,  // stderr only: wherever stdout goes
  };
  Kind kind = Kind::inherit;
  std::string path;  // append_to only

  static Redirect inherit() { return {Kind::inherit, {}}; }
  static Redirect pipe() { return {Kind::pipe, {}}; }
  static Redirect null() { return {Kind::null, {}}; }
  static Redirect append_to(std::string path) { return {Kind::append_to, std::move(path)}; }
  static Redirect to_stdout() { return {Kind::to_stdout, {}}; }
};

struct SpawnOptions {
  // argv[0] is the program: looked up on $PATH (this process's) when it contains no '/'.
  std::vector<std::string> argv;
  // The child's environment ("NAME=value" entries); nullopt: this process's environment.
  std::optional<std::vector<std::string>> env;
  Redirect in = Redirect::inherit();
  Redirect out = Redirect::inherit();
  Redirect err = Redirect::inherit();
  // setsid(): its own session and process group, no controlling terminal (so it outlives
  // this process's session and a terminal's ^C does not reach it).
  bool new_session = false;
  // Start with no signal blocked; otherwise the child inherits the calling thread's mask.
  bool clear_signal_mask = false;
  // Its own process group (pgid = its pid, so signal(-pid) reaches what it starts), and SIGKILL
  // when the thread that spawned it exits (PR_SET_PDEATHSIG: with this process, as long as that
  // thread is the one that lives as long as the process, e.g. the server's loop thread). For
  // helpers that must never outlive this process (MCP tool servers). posix_spawn cannot set the
  // death signal: this option starts the child with fork and exec (only async-signal-safe calls
  // between them); new_session is then ignored (the group is what it gets).
  bool die_with_parent = false;
  // The child's working directory; empty: this process's.
  std::string cwd;
};

// The program could not be started: not found, not executable, or a redirection file could not
// be opened. what(): "cannot start 'PROGRAM': REASON".
class SpawnError : public std::runtime_error {
 public:
  SpawnError(std::string program, int error);
  const std::string& program() const noexcept { return program_; }
  int error() const noexcept { return error_; }  // the errno value posix_spawn reported

 private:
  std::string program_;
  int error_;
};

class Subprocess {
 public:
  // Starts options.argv. Throws SpawnError when the program cannot be started, and
  // std::system_error when the pipes cannot be created, std::invalid_argument for a
  // redirection the stream does not take (see Redirect::Kind) or an empty argv.
  static Subprocess spawn(const SpawnOptions& options);

  Subprocess() = default;  // holds no process
  // Owns the child: destruction SIGKILLs and reaps it unless it was reaped or released; a
  // die_with_parent child's whole process group is SIGKILLed too (even after the child itself was
  // reaped: its own children, e.g. npx's node, would otherwise outlive it). The pipe ends are
  // closed after that.
  ~Subprocess();
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;  // the child held before is as destroyed
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // Sends sig to its whole process group (die_with_parent and new_session children lead their
  // own group); false when nothing was sent (no group of its own, released, or the group is
  // empty). Unlike signal(), also after the child was reaped: what it started may still run in
  // its group, and Linux does not reuse a pid as long as a process group of that id exists.
  bool signal_group(int sig);

  // The pid it was started with (unchanged after reaping or release); -1 when it holds none.
  pid_t pid() const { return pid_; }
  // True once a wait has collected its exit status (the pid may belong to another process now).
  bool reaped() const { return status_.has_value(); }
  // The wait status once reaped.
  std::optional<int> status() const { return status_; }

  // This process's ends of the pipes asked for (the write end for stdin, read ends for stdout
  // and stderr); null for streams that are not pipes. Assign nullptr to close one early (closing
  // stdin gives the child EOF), or move it out to keep it beyond this object.
  kj::AutoCloseFd& stdin_pipe() { return stdin_; }
  kj::AutoCloseFd& stdout_pipe() { return stdout_; }
  kj::AutoCloseFd& stderr_pipe() { return stderr_; }

  // The waits below require a process (not default-constructed, moved-from or released; they
  // throw std::logic_error otherwise) and return at once with the same status once reaped.
  // A child that cannot be waited for (ECHILD: SIGCHLD ignored, or reaped elsewhere) counts as
  // reaped with status 0.

  // Blocks until it exits; returns the wait status.
  int wait();
  // The wait status if it has exited, else nullopt (does not block).
  std::optional<int> try_wait();
  // Waits up to timeout (polling every few ms); nullopt if it still runs then.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);
  // SIGTERM, waits up to grace, then SIGKILL and waits. Returns the wait status.
  int terminate(std::chrono::milliseconds grace);

  // Sends sig unless it was reaped or released (so the signal never reaches a reused pid).
  // False when nothing was sent or kill() failed.
  bool signal(int sig);

  // Gives up ownership: the child keeps running, this object no longer waits for, signals or
  // kills it (whoever knows the pid may). The pipe ends stay here. Returns the pid.
  pid_t release();

 private:
  void require_process() const;

  // Whether the child leads its own process group, and whether destruction kills that group.
  enum class Group { none, owned, owned_killed };

  pid_t pid_ = -1;
  bool released_ = false;
  std::optional<int> status_;
  Group group_ = Group::none;
  kj::AutoCloseFd stdin_;
  kj::AutoCloseFd stdout_;
  kj::AutoCloseFd stderr_;
};

// A wait status as text: "exited with status N", "was killed by signal N", or "stopped".
std::string describe_wait_status(int status);

// This process's environment as "NAME=value" entries (to edit into SpawnOptions::env).
std::vector<std::string> current_environment();

// The threads process pid runs now (0: this process), from /proc; 0 when there is no such process
// on this machine. What the benchmarks and tests read to show waiting work holds no thread.
std::size_t thread_count(pid_t pid = 0);

}  // namespace agentd::detail
