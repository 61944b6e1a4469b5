// StateStore: the durable copy of a server's agents and finished results (as_server --state-dir).
//
// One SQLite database, DIR/agentd.db, in WAL mode with synchronous=FULL: a commit that returned
// survives a crash of the process or the machine. Tables:
//   meta     format version, the agentd version that wrote it, the server id
//   agents   id, name, class, args and the agent's own saved state (Agent::save_state()), in
//            creation order
//   memory   each agent's memory, one message a row, so a call appends only what it added
//   results  finished results of reply / method_async calls by call id, newest last
// Values and messages are stored in their Cap'n Proto wire form (one flat message each).
//
// Group commit: changes are queued from any thread and a writer thread applies everything queued
// in one transaction, then runs the changes' done callbacks (on the writer thread) in the order
// they were submitted. While one transaction is being synced to disk the next batch gathers, so
// many calls share one fsync. A change submitted to an idle store may be committed by the thread
// that submitted it instead (submit_to_lead: a worker that finished a call), without the hop.
//
// A write that fails (disk full, I/O error, the file removed) rolls its transaction back: the
// store keeps what it last committed, reports the failure to every change of that batch and of
// any later one (failure()), and accepts no more writes. What was acknowledged before stays in
// the database, which stays readable; a restart resumes from it.
//
// Beside it, DIR/agentd.run (RunJournal) records the calls running and the commits acknowledged,
// so that a start can tell (a) which calls the last run was running when it died (restored as
// interrupted results: they may have run), (b) that the database lost acknowledged commits (a
// missing or truncated write-ahead log: refused). The results table keeps what the result pool
// keeps; the newest finishing time of the results trimmed from it is kept as the "forgotten"
// horizon (meta forgotten_until_ms): a call id unknown to the store was either never applied or
// finished before that time, which is what a reconnecting client needs to tell not_applied from
// "cannot tell".
#pragma once

#include <agentd/error.h>
#include <agentd/msg.h>
#include <agentd/value.h>

#include "result_pool.h"
#include "run_journal.h"

#include <chrono>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

struct sqlite3;

namespace agentd::detail {

class WalBufferVfs;

// The stored (Cap'n Proto flat message) forms. decode_* throw std::runtime_error on bad bytes.
std::string encode_value(const Value& v);
Value decode_value(std::string_view bytes);
std::string encode_msg(const Msg& m);
Msg decode_msg(std::string_view bytes);
std::string encode_outcome(const Outcome& o);
Outcome decode_outcome(std::string_view bytes);
// Several encoded messages in one blob: each preceded by its length (4 bytes, little-endian).
void append_framed(std::string& blob, std::string_view item);
std::vector<std::string_view> split_framed(std::string_view blob);  // throws on a bad frame

class StateStore {
 public:
  // Bumped when the tables change incompatibly; a database of another format is refused, except
  // format 1, which a start upgrades in place (2: results.commit_seq, see apply()).
  static constexpr int kFormat = 2;

  struct AgentRow {
    std::string id;
    std::string name;
    std::string class_name;
    Value args;
    Value state;  // what the agent's save_state() returned (null: nothing of its own)
    std::vector<Msg> memory;
  };
  struct ResultRow {
    std::string call_id;
    std::string agent_id;
    OutcomePtr outcome;
  };
  struct Contents {
    std::vector<AgentRow> agents;    // in creation order
    std::vector<ResultRow> results;  // oldest first
    // Results finished at or before this time (unix ms; 0: none) are forgotten: not loaded, or
    // trimmed before. Also the restart time after a crash of the machine (the run journal's
    // running calls may be lost), so every call from before it is "cannot tell".
    std::int64_t forgotten_until_unix_ms = 0;
  };

  // Opens DIR/agentd.db, creating DIR (0700) and the database when missing, and takes an
  // exclusive lock on DIR itself (two servers on one state dir would overwrite each other; a
  // lock on the directory cannot be sidestepped by deleting a file). Reads DIR/agentd.run: the
  // calls the last run left running become interrupted results; fewer commits in the database
  // than the last run acknowledged refuse the start; after a run that did not stop cleanly the
  // database gets an integrity check. Throws Error(config_error) naming the file and what to do:
  // not a directory, not writable (a permission or a read-only file system: the data is fine),
  // locked by another process, an empty file, not an agentd database, another format, damaged,
  // acknowledged commits missing.
  explicit StateStore(std::string dir);
  ~StateStore();
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  const std::string& dir() const { return dir_; }
  const std::string& file() const { return file_; }

  // Everything stored: results finished within max_age, at most max_results (the newest).
  // Throws Error(config_error) naming the file and the agent or result that cannot be read.
  // Call before submitting anything.
  Contents load(std::size_t max_results, std::chrono::milliseconds max_age);
  // The server id a previous run saved (empty: none).
  std::string server_id();
  // Writes the server id (synchronously; before serving).
  void set_server_id(const std::string& id);
  // Deletes these agents with their memory (synchronously; --drop-missing-classes).
  void drop_agents(const std::vector<std::string>& ids);

  // One change to the stored state; applied in submission order.
  struct Change {
    enum class Kind { barrier, put_agent, delete_agent, delete_all, call };
    Kind kind = Kind::barrier;
    std::string agent_id;
    // put_agent: the whole row.
    std::string name;
    std::string class_name;
    std::string args;  // encoded
    // put_agent / call: the agent's own state, encoded (call: only when it changed).
    bool has_state = false;
    std::string state;
    // put_agent / call: the messages added to the agent's memory from position memory_from on,
    // framed (append_framed), stored as one row; memory_reset first deletes every row of the
    // agent (its memory was cleared).
    bool memory_reset = false;
    std::int64_t memory_from = 0;
    std::string memory;
    // call: the result of a reply / method_async call (empty call_id: none).
    std::string call_id;
    std::string outcome;  // encoded
  };
  // Runs on the thread that committed the change (the writer, or the one leading it) once it is
  // committed (failed == nullptr) or could not be (failed: a not_applied error saying why).
  using Done = std::function<void(const Error* failed)>;
  // Any thread. With a failure on record the change fails at once (done runs on this thread).
  void submit(Change change, Done done);
  // submit(), or, when no commit is running or queued, the caller commits this change itself
  // (true): it must then call lead() soon, or pass_lead() to leave it to the writer thread.
  // Saves a commit the hop to the writer thread and back when the store is idle (a program
  // waiting on each durable call).
  bool submit_to_lead(Change change, Done done);
  // After submit_to_lead() returned true: commits everything queued by now in one transaction on
  // this thread and runs its done callbacks here (in the done scope), as the writer would. Never
  // from a thread that must not block on the disk (the server's event loop), nor holding a lock
  // that done callbacks take (the done scope's).
  void lead();
  // After submit_to_lead() returned true: the writer thread commits it instead.
  void pass_lead();
  // Runs each batch's done callbacks inside scope (e.g. under their owner's lock, taken once
  // per batch instead of once per change). Set before submitting anything.
  using DoneScope = std::function<void(const std::function<void()>& run_dones)>;
  void set_done_scope(DoneScope scope) { done_scope_ = std::move(scope); }
  // Any thread: keep at most max_results results, none older than max_age (queued like a change).
  void trim_results(std::size_t max_results, std::chrono::milliseconds max_age);
  // Any thread: waits until everything submitted so far is committed (or failed) and its done
  // callbacks have run.
  void flush();
  // flush() for at most limit, and until no transaction is running (a trim's included): false
  // when the disk did not finish in time (a stalled commit; close() would wait for it).
  bool flush_for(std::chrono::milliseconds limit);
  // Any thread, about once a second: logs a commit that has been running for a long time (a
  // stalled disk), once per commit.
  void check_stall();
  // The calls running and the commits acknowledged (DIR/agentd.run).
  RunJournal& journal() { return *journal_; }
  // Flushes, then stops the writer. Idempotent; the destructor calls it.
  void close();

  // The write failure that stopped the store (a not_applied error), if any.
  std::optional<Error> failure() const;

  struct Stats {
    std::uint64_t bytes = 0;               // database + WAL on disk
    std::int64_t last_commit_unix_ms = 0;  // 0: none since start
    std::uint64_t commits = 0;
    std::uint64_t changes = 0;
    std::string error;  // the failure's message, if any
  };
  Stats stats() const;

 private:
  struct Pending {
    Change change;
    Done done;
  };
  void writer_main();
  // submit() with mu_ held (lock): queues the change and wakes the writer, or fails it at once.
  // Returns with the lock released.
  void enqueue(std::unique_lock<std::mutex>& lock, Change change, Done done);
  // Takes the queue (and a pending trim) and commits it as one batch, then runs its done
  // callbacks; lock held on entry and exit, released meanwhile. The thread with committing_.
  void run_batch(std::unique_lock<std::mutex>& lock);
  void end_lead_locked();  // a lead is over: the writer may commit again
  // The constructor's checks against the run journal and the database (see the constructor).
  // upgrading: a format 1 database, whose results have no commit_seq yet.
  void check_against_journal(bool fresh, bool upgrading);
  void record_interrupted();
  // Applies batch in one transaction; throws Error on failure (rolled back).
  void apply(std::vector<Pending>& batch, const std::optional<std::pair<std::size_t, std::int64_t>>& trim);
  // In apply()'s transaction: removes the results past the trim (max results, oldest finishing
  // time kept) and moves forgotten to the newest finishing time among them; false when it
  // removed none.
  bool trim_rows(const std::pair<std::size_t, std::int64_t>& trim, std::int64_t& forgotten);
  void exec(const char* sql);
  // Runs body in one write transaction, rolled back when it throws (the constructor's writes;
  // apply() has its own, with prepared statements).
  void in_transaction(const std::function<void()>& body);
  // The meta table's value for key (empty when there is none); throws std::runtime_error.
  std::string meta(const char* key);

  std::string dir_;
  std::string file_;
  int lock_fd_ = -1;  // DIR, flock()ed
  std::unique_ptr<RunJournal> journal_;
  // Commits in the database (writer thread). A commit's number is kept on the last result row it
  // writes (a page the commit writes anyway), else in meta's commit_seq; the count is the larger
  // of meta's and the newest result row's. So meta must be written by any transaction that adds
  // a result row without a number (record_interrupted) or removes result rows (a trim).
  std::uint64_t commit_seq_ = 0;
  std::int64_t forgotten_until_ms_ = 0;             // writer thread after the constructor
  std::atomic<std::int64_t> commit_started_ms_{0};  // 0: no commit running
  std::atomic<bool> stall_logged_{false};
  std::unique_ptr<WalBufferVfs> vfs_;  // db_'s; outlives it
  sqlite3* db_ = nullptr;
  struct Statements;
  std::unique_ptr<Statements> st_;

  mutable std::mutex mu_;
  std::condition_variable wake_;     // the writer: work queued, or closing
  std::condition_variable drained_;  // flush(): a batch finished
  std::vector<Pending> queue_;
  std::optional<std::pair<std::size_t, std::int64_t>> trim_;  // max results, max age (ms)
  bool results_written_ = false;  // writer thread: results committed since the last trim
  std::uint64_t submitted_ = 0;   // changes ever queued
  std::uint64_t finished_ = 0;    // changes whose done has run
  bool closing_ = false;
  // A batch is being committed, by the writer or by a caller leading it (submit_to_lead): one at
  // a time, so what "writer thread" marks above is touched by one thread at a time.
  bool committing_ = false;
  std::optional<Error> failure_;
  std::int64_t last_commit_ms_ = 0;
  std::uint64_t commits_ = 0;
  DoneScope done_scope_;
  std::thread writer_;
};

}  // namespace agentd::detail
