// StateStore: the durable copy of a server's agents and finished results (as_server --state-dir).
//
// Two files hold it. DIR/agentd.redo (CommitLog) is the log of acknowledged commits: a batch of
// changes is acknowledged once it is written there and synced. DIR/agentd.db is one SQLite
// database in WAL mode that a thread of its own (the applier) brings up to date from those
// batches afterwards, without syncing (synchronous=NORMAL); it checkpoints (which syncs the
// database file) whenever the log's live records pass a quarter of its size, and only then may
// the log's space be reused. A start replays the log's records past the database's last applied
// commit, so a crash of the process or the machine loses nothing acknowledged. Tables:
//   meta     format version, the agentd version that wrote it, the server id, the number of the
//            last applied commit and where the log's next record starts (commit_seq, redo_gen,
//            redo_offset)
//   agents   id, name, class, args and the agent's own saved state (Agent::save_state()), in
//            creation order
//   memory   each agent's memory, one message a row, so a call appends only what it added
//   results  finished results of reply / method_async calls by call id, newest last
// Values and messages are stored in their Cap'n Proto wire form (one flat message each).
//
// Group commit: changes are queued from any thread and a writer thread logs everything queued
// as one record, then runs the changes' done callbacks (on the writer thread) in the order they
// were submitted. While one record is being synced the next batch gathers, so many calls share
// one fdatasync. A change submitted to an idle store may be logged by the thread that submitted
// it instead (submit_to_lead: a worker that finished a call), without the hop.
//
// A write that fails (disk full, I/O error, the file removed), of the log or of the database,
// stops the store: it reports the failure to every change not yet acknowledged and to any later
// one (failure()), and accepts no more writes. What was acknowledged before stays in the log or
// the database; a restart replays it.
//
// Beside it, DIR/agentd.run (RunJournal) records the calls running and the commits acknowledged,
// so that a start can tell (a) which calls the last run was running when it died (restored as
// interrupted results: they may have run), (b) that acknowledged commits are missing (the log
// and the write-ahead log removed, an older database put back: refused). The results table
// keeps what the result pool keeps; the newest finishing time of the results trimmed from it is
// kept as the "forgotten" horizon (meta forgotten_until_ms): a call id unknown to the store was
// either never applied or finished before that time, which is what a reconnecting client needs to
// tell not_applied from "cannot tell".
#pragma once

#include <agentd/error.h>
#include <agentd/msg.h>
#include <agentd/value.h>

#include "commit_log.h"
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
// The next item of blob, which it moves past; throws std::runtime_error(truncated) on a bad frame.
std::string_view take_framed(std::string_view& blob, const char* truncated);

class StateStore {
 public:
  // Bumped when the tables change incompatibly; a database of another format is refused, except
  // formats 1 and 2, which a start upgrades in place (2: results.commit_seq, 3: the commit log,
  // whose records a format 2 reader would ignore).
  static constexpr int kFormat = 3;

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
  // log_bytes: the commit log's size (tests use a small one to make it wrap).
  explicit StateStore(std::string dir, std::uint64_t log_bytes = CommitLog::kDefaultBytes);
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
  // in the synced commit log (failed == nullptr) or could not be (failed: a not_applied error
  // saying why).
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
  // Any thread: waits until everything submitted so far is committed (or failed), its done
  // callbacks have run, and the database holds it.
  void flush();
  // flush() for at most limit, and until no write is running (a trim's included): false when the
  // disk did not finish in time (a stalled commit; close() would wait for it).
  bool flush_for(std::chrono::milliseconds limit);
  // Any thread, about once a second: logs a commit (or the applier's transaction) that has been
  // running for a long time (a stalled disk), once per commit.
  void check_stall();
  // The calls running and the commits acknowledged (DIR/agentd.run).
  RunJournal& journal() { return *journal_; }
  // Flushes, then stops the writer and the applier. Idempotent; the destructor calls it.
  void close();

  // The write failure that stopped the store (a not_applied error), if any.
  std::optional<Error> failure() const;

  struct Stats {
    std::uint64_t bytes = 0;               // database + WAL + commit log on disk
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
  // A logged batch on its way to the database.
  struct Applying {
    std::vector<Change> changes;
    std::int64_t now_ms = 0;  // its results' finishing time
    std::uint64_t seq = 0;    // its commit number (0: a start-up write, not logged)
    std::uint64_t end = 0;    // where the log's next record starts
  };
  void writer_main();
  void applier_main();
  // submit() with mu_ held (lock): queues the change and wakes the writer, or fails it at once.
  // Returns with the lock released.
  void enqueue(std::unique_lock<std::mutex>& lock, Change change, Done done);
  // Takes the queue and logs it as one record, hands it to the applier, then runs its done
  // callbacks; lock held on entry and exit, released meanwhile. The thread with committing_.
  void run_batch(std::unique_lock<std::mutex>& lock);
  void end_lead_locked();  // a lead is over: the writer may commit again
  // The constructor's checks of the database after the last run (see the constructor).
  // upgrading_from_1: a format 1 database, whose results have no commit_seq yet.
  void check_against_journal(bool fresh, bool upgrading_from_1);
  // Applies the log's records past the database's last commit (the constructor).
  void replay_log(bool fresh);
  // Refuses a start whose database and log hold fewer commits than the last run acknowledged.
  void check_commits();
  // Records the last run's interrupted calls and starts the log's new generation.
  void record_interrupted();
  // Applies items in one transaction (the applier, or the constructor); throws on failure
  // (rolled back). A numbered item's number and log position go to meta.
  void apply(std::vector<Applying>& items, const std::optional<std::pair<std::size_t, std::int64_t>>& trim);
  // Copies the write-ahead log into the database file and syncs it: true when complete (false:
  // a reader, such as a backup, held it back). Throws on failure.
  bool checkpoint();
  Error busy_elsewhere() const;  // checkpoint() was held back at start (config_error)
  // checkpoint() for set_server_id() and drop_agents(), which are not logged; db_mu_ held.
  // Throws Error(config_error).
  void sync_startup_write();
  // The not_applied error of a failed write; behind_log: the database's, which the commit log's
  // records (acknowledged) wait for.
  Error write_failure(std::string_view why, bool behind_log) const;
  static std::string encode_batch(const std::vector<Pending>& batch, std::int64_t now_ms);
  static std::vector<Change> decode_batch(std::string_view payload, std::int64_t& now_ms);
  // In apply()'s transaction: removes the results past the trim (max results, oldest finishing
  // time kept) and moves forgotten to the newest finishing time among them.
  void trim_rows(const std::pair<std::size_t, std::int64_t>& trim, std::int64_t& forgotten);
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
  std::unique_ptr<CommitLog> log_;  // placing and bookkeeping under mu_
  // Commits acknowledged (the committing thread). In the database, meta's commit_seq is the last
  // applied one; format 2 kept it on the newest result row, so a start reads the larger of both.
  std::uint64_t commit_seq_ = 0;
  std::uint64_t applied_seq_ = 0;                   // applier thread
  std::int64_t forgotten_until_ms_ = 0;             // applier thread after the constructor
  std::atomic<std::int64_t> commit_started_ms_{0};  // 0: no commit running
  std::atomic<bool> stall_logged_{false};
  std::atomic<std::int64_t> apply_started_ms_{0};  // 0: the applier is not writing
  std::atomic<bool> apply_stall_logged_{false};
  std::mutex db_mu_;                   // db_ between the applier and the start-up calls
  std::unique_ptr<WalBufferVfs> vfs_;  // db_'s; outlives it
  sqlite3* db_ = nullptr;
  struct Statements;
  std::unique_ptr<Statements> st_;

  mutable std::mutex mu_;
  std::condition_variable wake_;        // the writer: work queued, or closing
  std::condition_variable drained_;     // flush(): a batch finished
  std::condition_variable apply_wake_;  // the applier: batches, a trim, a checkpoint, or stop
  std::condition_variable space_;       // a committer waiting for room in the log
  std::vector<Pending> queue_;
  std::vector<Applying> applying_;  // logged, for the applier
  std::size_t applying_bytes_ = 0;  // their records' payloads
  // The applier gathers batches this long, or this many bytes, into one transaction; it
  // checkpoints once the write-ahead log holds this many frames (4 KiB pages).
  static constexpr std::chrono::milliseconds kApplyDelay{10};
  static constexpr std::size_t kApplyBytes = 256u << 10;
  static constexpr int kCheckpointFrames = 1000;
  std::atomic<int> wal_frames_{0};  // in the write-ahead log after the last commit (SQLite's hook)
  // flush() and flush_for() waiting (mu_): the applier does not gather meanwhile.
  int flushing_ = 0;
  struct Flushing {  // mu_ held on construction and destruction
    explicit Flushing(StateStore& s) : store(s) {
      ++store.flushing_;
      store.apply_wake_.notify_one();
    }
    ~Flushing() { --store.flushing_; }
    Flushing(const Flushing&) = delete;
    Flushing& operator=(const Flushing&) = delete;
    StateStore& store;
  };
  std::optional<std::pair<std::size_t, std::int64_t>> trim_;  // max results, max age (ms)
  bool want_checkpoint_ = false;                              // a committer waits for room in the log
  bool applier_stop_ = false;
  bool results_written_ = false;  // applier thread: results applied since the last trim
  std::uint64_t submitted_ = 0;   // changes ever queued
  std::uint64_t finished_ = 0;    // changes whose done has run
  std::uint64_t applied_ = 0;     // changes in the database (or given up: failed)
  bool closing_ = false;
  // close() has joined the writer: a flush waits for nothing more. (Read under mu_, where
  // writer_.joinable() would race with close()'s join.)
  bool writer_done_ = false;
  // A batch is being committed, by the writer or by a caller leading it (submit_to_lead): one at
  // a time, so what "writer thread" marks above is touched by one thread at a time.
  bool committing_ = false;
  std::optional<Error> failure_;
  std::int64_t last_commit_ms_ = 0;
  std::uint64_t commits_ = 0;
  DoneScope done_scope_;
  std::thread writer_;
  std::thread applier_;
};

}  // namespace agentd::detail
