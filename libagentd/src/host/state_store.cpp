#include "state_store.h"

#include "crash_report.h"
#include "outcome_codec.h"
#include "state_store_sql.h"
#include "value_codec.h"
#include "wal_buffer_vfs.h"
#include "wire_limits.h"

#include <agentd/version.h>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sqlite3.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

namespace agentd::detail {

// ---- the stored forms ----

namespace {

// change adds a row to results: a call's (or a restored agent's) with a call id.
bool writes_result(const StateStore::Change& c) {
  return (c.kind == StateStore::Change::Kind::put_agent || c.kind == StateStore::Change::Kind::call) &&
         !c.call_id.empty();
}

template <typename Fill>
std::string flat(Fill&& fill) {
  capnp::MallocMessageBuilder message;
  fill(message);
  auto words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

// Reads bytes as one flat message (copied: SQLite's blobs need not be word-aligned).
class FlatReader {
 public:
  explicit FlatReader(std::string_view bytes)
      : words_(kj::heapArray<capnp::word>((bytes.size() + sizeof(capnp::word) - 1) / sizeof(capnp::word))) {
    if (bytes.size() % sizeof(capnp::word) != 0 || bytes.empty())
      throw std::runtime_error("not a whole Cap'n Proto message");
    std::memcpy(words_.begin(), bytes.data(), bytes.size());
    capnp::ReaderOptions options = wire_reader_options();  // any value within kMaxValueDepth
    options.traversalLimitInWords = words_.size() * 2 + 1024;
    reader_.emplace(words_.asPtr(), options);
  }
  template <typename T>
  typename T::Reader root() {
    return reader_->getRoot<T>();
  }

 private:
  kj::Array<capnp::word> words_;
  std::optional<capnp::FlatArrayMessageReader> reader_;
};

template <typename T, typename F>
auto decode(std::string_view bytes, F&& read) {
  try {
    FlatReader r(bytes);
    return read(r.root<T>());
  } catch (const kj::Exception& e) {
    throw std::runtime_error(e.getDescription().cStr());
  }
}

}  // namespace

std::string encode_value(const Value& v) {
  return flat([&](capnp::MessageBuilder& m) { write_value(v, m.initRoot<wire::Value>()); });
}

Value decode_value(std::string_view bytes) {
  return decode<wire::Value>(bytes, [](wire::Value::Reader r) { return read_value(r); });
}

std::string encode_msg(const Msg& msg) {
  return flat([&](capnp::MessageBuilder& m) { write_msg(msg, m.initRoot<wire::Msg>()); });
}

Msg decode_msg(std::string_view bytes) {
  return decode<wire::Msg>(bytes, [](wire::Msg::Reader r) { return read_msg(r); });
}

std::string encode_outcome(const Outcome& o) {
  return flat([&](capnp::MessageBuilder& m) {
    auto out = m.initRoot<wire::Outcome>();
    if (const Msg* msg = std::get_if<Msg>(&o))
      write_msg(*msg, out.initMsg());
    else
      write_error(std::get<Error>(o), out.initError());
    write_usage(o.usage, out);
  });
}

Outcome decode_outcome(std::string_view bytes) {
  return decode<wire::Outcome>(bytes, [](wire::Outcome::Reader r) -> Outcome {
    Outcome o = [&]() -> Outcome {
      switch (r.which()) {
        case wire::Outcome::MSG:
          return read_msg(r.getMsg());
        case wire::Outcome::ERROR:
          return read_error(r.getError());
        default:
          throw std::runtime_error("a stored outcome is neither a message nor an error");
      }
    }();
    o.usage = read_usage(r);
    return o;
  });
}

void append_framed(std::string& blob, std::string_view item) {
  const auto n = static_cast<std::uint32_t>(item.size());
  const char len[4] = {static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                       static_cast<char>((n >> 16) & 0xff), static_cast<char>((n >> 24) & 0xff)};
  blob.append(len, 4);
  blob.append(item);
}

std::string_view take_framed(std::string_view& blob, const char* truncated) {
  if (blob.size() < 4) throw std::runtime_error(truncated);
  const auto* b = reinterpret_cast<const unsigned char*>(blob.data());
  const std::size_t n = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<std::size_t>(b[3]) << 24);
  if (blob.size() - 4 < n) throw std::runtime_error(truncated);
  const std::string_view item = blob.substr(4, n);
  blob.remove_prefix(4 + n);
  return item;
}

std::vector<std::string_view> split_framed(std::string_view blob) {
  std::vector<std::string_view> out;
  while (!blob.empty()) out.push_back(take_framed(blob, "a truncated memory frame"));
  return out;
}

void StateStore::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string why = err != nullptr ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    throw std::runtime_error(why);
  }
}

StateStore::~StateStore() {
  close();
  set_crash_journal(nullptr);
  st_.reset();
  if (db_ != nullptr) sqlite3_close_v2(db_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

StateStore::Contents StateStore::load(std::size_t max_results, std::chrono::milliseconds max_age) {
  std::lock_guard db_lock(db_mu_);
  Contents out;
  std::string where = "the agents";
  try {
    std::unordered_map<std::string, std::size_t> index;
    Stmt agents(db_, "SELECT id, name, class, args, state FROM agents ORDER BY seq");
    while (agents.row()) {
      AgentRow a;
      a.id = std::string(agents.column(0));
      where = "agent '" + a.id + "'";
      a.name = std::string(agents.column(1));
      a.class_name = std::string(agents.column(2));
      a.args = decode_value(agents.column(3));
      if (!agents.column_null(4)) a.state = decode_value(agents.column(4));
      index.emplace(a.id, out.agents.size());
      out.agents.push_back(std::move(a));
    }
    Stmt memory(db_, "SELECT agent_id, msgs FROM memory ORDER BY agent_id, pos");
    while (memory.row()) {
      std::string agent(memory.column(0));
      where = "the memory of agent '" + agent + "'";
      auto it = index.find(agent);
      if (it == index.end()) continue;  // left by a deletion's memory rows (never committed apart)
      for (auto m : split_framed(memory.column(1))) out.agents[it->second].memory.push_back(decode_msg(m));
    }
    where = "the results";
    Stmt results(db_,
                 "SELECT call_id, agent_id, outcome FROM results WHERE finished_ms >= ?1 "
                 "ORDER BY seq DESC LIMIT ?2");
    results.integer(1, now_unix_ms() - max_age.count())
        .integer(2, static_cast<std::int64_t>(std::min<std::size_t>(max_results, INT64_MAX)));
    std::unordered_set<std::string> seen;  // newest first: an id written twice keeps its last
    while (results.row()) {
      ResultRow r;
      r.call_id = std::string(results.column(0));
      if (!seen.insert(r.call_id).second) continue;
      where = "the result of call '" + r.call_id + "'";
      r.agent_id = std::string(results.column(1));
      r.outcome = std::make_shared<const Outcome>(decode_outcome(results.column(2)));
      out.results.push_back(std::move(r));
    }
    std::reverse(out.results.begin(), out.results.end());
    // The results not loaded are forgotten as trimmed ones are.
    where = "the results";
    out.forgotten_until_unix_ms = forgotten_until_ms_;
    Stmt older(db_,
               "SELECT max(finished_ms) FROM results WHERE finished_ms < ?1 OR seq <= (SELECT seq "
               "FROM results WHERE finished_ms >= ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)");
    older.integer(1, now_unix_ms() - max_age.count())
        .integer(2, static_cast<std::int64_t>(std::min<std::size_t>(max_results, INT64_MAX)));
    if (older.row()) {
      if (!older.column_null(0))
        out.forgotten_until_unix_ms = std::max(out.forgotten_until_unix_ms, older.column_int(0));
      older.row();
    }
  } catch (const std::exception& e) {
    throw Error(ErrorCode::config_error,
                fmt::format("{}: cannot read {}: {} (a damaged file: restore it from a backup, "
                            "or move the directory away to start with no agents)",
                            file_, printable(where), printable(e.what())));
  }
  return out;
}

void StateStore::in_transaction(const std::function<void()>& body) {
  exec("BEGIN IMMEDIATE");
  try {
    body();
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

std::string StateStore::meta(const char* key) {
  Stmt read(db_, "SELECT value FROM meta WHERE key = ?1");
  read.text(1, key);
  if (!read.row()) return {};
  std::string out(read.column(0));
  read.row();  // past the one row: resets the statement
  return out;
}

std::string StateStore::server_id() {
  std::lock_guard db_lock(db_mu_);
  try {
    return meta("server_id");
  } catch (const std::exception& e) {
    throw Error(ErrorCode::config_error, fmt::format("{}: cannot read: {}", file_, e.what()));
  }
}

void StateStore::set_server_id(const std::string& id) {
  std::lock_guard db_lock(db_mu_);
  try {
    Stmt put(db_, "INSERT OR REPLACE INTO meta (key, value) VALUES ('server_id', ?1)");
    put.text(1, id).run();
  } catch (const std::exception& e) {
    throw Error(ErrorCode::config_error, fmt::format("{}: cannot write: {}", file_, e.what()));
  }
  sync_startup_write();  // not logged: synced here
}

void StateStore::drop_agents(const std::vector<std::string>& ids) {
  // One transaction of deletions, applied and synced here (not logged): nothing is submitted
  // yet, so the writer and the applier are idle.
  std::vector<Applying> items(1);
  items[0].changes.reserve(ids.size());
  for (const auto& id : ids) {
    Change c;
    c.kind = Change::Kind::delete_agent;
    c.agent_id = id;
    items[0].changes.push_back(std::move(c));
  }
  std::lock_guard db_lock(db_mu_);
  try {
    apply(items, std::nullopt);
  } catch (const std::exception& e) {
    throw Error(ErrorCode::config_error, fmt::format("{}: cannot write: {}", file_, e.what()));
  }
  sync_startup_write();
}

void StateStore::submit(Change change, Done done) {
  std::unique_lock lock(mu_);
  enqueue(lock, std::move(change), std::move(done));
}

void StateStore::enqueue(std::unique_lock<std::mutex>& lock, Change change, Done done) {
  if (failure_ || closing_) {
    Error e = failure_ ? *failure_ : Error(ErrorCode::not_applied, "the server's state store is closed");
    lock.unlock();
    if (done) done(&e);
    return;
  }
  queue_.push_back(Pending{std::move(change), std::move(done)});
  ++submitted_;
  // The writer waits only when the queue was empty and nobody commits: a committing writer looks
  // at the queue again when done, and a lead's end wakes it (end_lead_locked).
  const bool wake = queue_.size() == 1 && !committing_;
  // Woken after the unlock: a writer woken while this thread holds mu_ would sleep on it at once
  // and be woken again (two more context switches on a durable call's path).
  lock.unlock();
  if (wake) wake_.notify_one();
}

bool StateStore::submit_to_lead(Change change, Done done) {
  std::unique_lock lock(mu_);
  const bool lead = !failure_ && !closing_ && !committing_ && queue_.empty();
  if (lead) committing_ = true;  // the writer leaves the queue to the caller (and is not woken)
  enqueue(lock, std::move(change), std::move(done));
  return lead;
}

void StateStore::lead() {
  std::unique_lock lock(mu_);
  run_batch(lock);
  end_lead_locked();
}

void StateStore::pass_lead() {
  std::unique_lock lock(mu_);
  end_lead_locked();
}

void StateStore::end_lead_locked() {
  committing_ = false;
  // What was submitted meanwhile, or a close: the writer's now. Notified under the lock: a
  // close() waiting for this lead may destroy the store as soon as the writer can exit.
  if (!queue_.empty() || closing_) wake_.notify_one();
}

void StateStore::trim_results(std::size_t max_results, std::chrono::milliseconds max_age) {
  std::lock_guard lock(mu_);
  trim_ = std::make_pair(max_results, now_unix_ms() - max_age.count());
  apply_wake_.notify_one();
}

void StateStore::flush() {
  std::unique_lock lock(mu_);
  Flushing hurry(*this);
  const std::uint64_t target = submitted_;
  drained_.wait(lock, [&] { return (finished_ >= target && applied_ >= target) || writer_done_; });
}

bool StateStore::flush_for(std::chrono::milliseconds limit) {
  std::unique_lock lock(mu_);
  Flushing hurry(*this);
  const std::uint64_t target = submitted_;
  // A trim has no change of its own to count: the applier must also be between transactions, or
  // close() would wait for the stuck one.
  return drained_.wait_for(lock, limit, [&] {
    return (finished_ >= target && applied_ >= target && commit_started_ms_.load() == 0 &&
            apply_started_ms_.load() == 0 && !trim_) ||
           writer_done_;
  });
}

void StateStore::check_stall() {
  const std::int64_t started = commit_started_ms_.load();
  const std::int64_t ms = started == 0 ? 0 : now_unix_ms() - started;
  if (ms >= 2000 && !stall_logged_.exchange(true))
    spdlog::warn(
        "state store: a commit to {} has been running for {:.1f} s (the disk stalls?); "
        "calls are not reported done until it finishes",
        log_->path(), ms / 1000.0);
  const std::int64_t applying = apply_started_ms_.load();
  const std::int64_t apply_ms = applying == 0 ? 0 : now_unix_ms() - applying;
  if (apply_ms >= 2000 && !apply_stall_logged_.exchange(true))
    spdlog::warn(
        "state store: writing to {} has been running for {:.1f} s (the disk stalls?); calls "
        "are still acknowledged from the commit log until it fills",
        file_, apply_ms / 1000.0);
}

void StateStore::close() {
  {
    std::lock_guard lock(mu_);
    if (closing_) return;
    closing_ = true;
    wake_.notify_one();
  }
  if (writer_.joinable()) writer_.join();
  // Everything is logged: the applier finishes what it was given, then stops.
  {
    std::lock_guard lock(mu_);
    writer_done_ = true;
    applier_stop_ = true;
    apply_wake_.notify_one();
  }
  if (applier_.joinable()) applier_.join();
  drained_.notify_all();
  if (journal_) journal_->mark_clean();
}

std::optional<Error> StateStore::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

StateStore::Stats StateStore::stats() const {
  Stats s;
  {
    std::lock_guard lock(mu_);
    s.last_commit_unix_ms = last_commit_ms_;
    s.commits = commits_;
    s.changes = finished_;
    if (failure_) s.error = failure_->message();
  }
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm"}) {
    auto n = std::filesystem::file_size(file_ + suffix, ec);
    if (!ec) s.bytes += n;
  }
  if (log_) s.bytes += log_->file_bytes();
  return s;
}

void StateStore::writer_main() {
  std::unique_lock lock(mu_);
  for (;;) {
    // A caller leading a commit (submit_to_lead) has the queue until it is done.
    wake_.wait(lock, [&] { return !committing_ && (!queue_.empty() || closing_); });
    if (queue_.empty() && closing_) break;
    committing_ = true;
    run_batch(lock);
    committing_ = false;
  }
}

void StateStore::run_batch(std::unique_lock<std::mutex>& lock) {
  std::vector<Pending> batch;
  batch.swap(queue_);
  if (batch.empty()) return;
  std::optional<Error> failed;  // this batch's own
  bool logged = false;
  if (!failure_) {
    lock.unlock();
    const std::int64_t now = now_unix_ms();
    std::string payload = encode_batch(batch, now);
    lock.lock();
    // Room in the log: the applier frees it with a checkpoint (or fails, and fails this too).
    std::optional<std::uint64_t> at;
    while (!(at = log_->place(payload.size())) && !failure_) {
      want_checkpoint_ = true;
      apply_wake_.notify_one();
      space_.wait(lock);
    }
    if (at) {
      const std::uint64_t seq = commit_seq_ + 1;
      lock.unlock();
      const std::int64_t started = now_unix_ms();
      commit_started_ms_.store(started);
      std::uint64_t end = 0;
      try {
        end = log_->append(*at, seq, payload);
        logged = true;
      } catch (const std::exception& e) {
        log_->erase(*at);
        failed = write_failure(e.what(), false);
        spdlog::error("state store: {}", failed->message());
      }
      commit_started_ms_.store(0);
      const std::int64_t took = now_unix_ms() - started;
      if (stall_logged_.exchange(false))
        spdlog::warn("state store: the stalled commit finished after {:.1f} s", took / 1000.0);
      else if (took >= 1000)
        spdlog::warn(
            "state store: a commit of {} change(s) to {} took {:.1f} s (a slow disk); "
            "calls wait for their commit",
            batch.size(), log_->path(), took / 1000.0);
      lock.lock();
      if (logged) {
        log_->added(seq, *at, end);
        commit_seq_ = seq;
        journal_->set_commits(seq);
        last_commit_ms_ = now_unix_ms();
        ++commits_;
        Applying item;
        item.changes.reserve(batch.size());
        for (auto& p : batch) item.changes.push_back(std::move(p.change));
        item.now_ms = now;
        item.seq = seq;
        item.end = end;
        applying_.push_back(std::move(item));
        applying_bytes_ += payload.size();
        // The applier sleeps until the first batch, then gathers until enough bytes (or time).
        if (applying_.size() == 1 || applying_bytes_ >= kApplyBytes) apply_wake_.notify_one();
      } else if (!failure_) {
        failure_ = failed;
      }
    }
  }
  // A logged batch is acknowledged even when the applier failed meanwhile: a restart replays it.
  // Any other fails with the store's first failure (the same error for every change).
  std::optional<Error> report;
  if (!logged) {
    report = failure_;
    applied_ += batch.size();  // never reaches the applier
  }
  lock.unlock();
  auto run_dones = [&] {
    for (auto& p : batch)
      if (p.done) p.done(report ? &*report : nullptr);
  };
  if (done_scope_)
    done_scope_(run_dones);
  else
    run_dones();
  lock.lock();
  finished_ += batch.size();
  drained_.notify_all();
}

void StateStore::applier_main() {
  // Below the threads that run and answer calls: the log already made the work durable, so a
  // call that finishes while SQLite applies should get the CPU first (on a machine with few cores
  // the difference shows in the tail). Best effort; nice 10 still gets a share under load.
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
  std::unique_lock lock(mu_);
  bool retry = false;  // a checkpoint a committer waits for was held back by a reader
  for (;;) {
    auto work = [&] { return !applying_.empty() || trim_ || want_checkpoint_ || applier_stop_; };
    if (retry)
      want_checkpoint_ = want_checkpoint_ || !apply_wake_.wait_for(lock, std::chrono::milliseconds(50), work);
    else
      apply_wake_.wait(lock, work);
    // Batches gather for a while before one transaction applies them all: a program waiting on
    // each durable call would otherwise cost SQLite a transaction (and the WAL a few pages) per
    // call. Nothing reads the database while the server runs, so only flush() hurries it.
    auto now = [&] {
      return want_checkpoint_ || applier_stop_ || flushing_ > 0 || trim_ || applying_bytes_ >= kApplyBytes;
    };
    if (!applying_.empty() && !now()) apply_wake_.wait_for(lock, kApplyDelay, now);
    if (applying_.empty() && applier_stop_) break;  // a trim asked for at the close is dropped
    std::vector<Applying> items;
    items.swap(applying_);
    applying_bytes_ = 0;
    auto trim = trim_;
    trim_.reset();
    // A checkpoint once the log's live records pass a quarter of it, when the write-ahead log has
    // grown (SQLite's own automatic checkpoint is off: this one also frees the log's space), or
    // when a committer waits for room.
    const bool full = want_checkpoint_ || log_->live_bytes() >= log_->file_bytes() / 4 ||
                      wal_frames_.load(std::memory_order_relaxed) >= kCheckpointFrames;
    want_checkpoint_ = false;
    const bool failed_before = failure_.has_value();
    // Set before the lock is released: flush_for() must not see the trim neither queued nor run.
    const std::int64_t started = now_unix_ms();
    if (!failed_before) apply_started_ms_.store(started);
    lock.unlock();
    std::size_t changes = 0;
    for (const auto& item : items) {
      changes += item.changes.size();
      for (const auto& c : item.changes)
        if (!c.call_id.empty()) results_written_ = true;
    }
    // Trimming when no result was written since the last trim would only cost a write.
    if (trim && !results_written_) trim.reset();
    if (trim) results_written_ = false;
    std::optional<Error> failed;
    bool durable = false;
    if (!failed_before) {
      std::lock_guard db_lock(db_mu_);
      try {
        if (!items.empty() || trim) apply(items, trim);
        if (full && (durable = checkpoint())) wal_frames_.store(0, std::memory_order_relaxed);
      } catch (const std::exception& e) {
        failed = write_failure(e.what(), true);
        spdlog::error("state store: {}", failed->message());
      }
      apply_started_ms_.store(0);
      const std::int64_t took = now_unix_ms() - started;
      if (apply_stall_logged_.exchange(false))
        spdlog::warn("state store: the stalled write to {} finished after {:.1f} s", file_, took / 1000.0);
    }
    lock.lock();
    if (failed && !failure_) failure_ = failed;
    if (durable) log_->set_durable(applied_seq_);
    if (durable || failure_) space_.notify_all();
    // Busy: a reader (a backup) holds the write-ahead log. A committer waiting for room must not
    // wait for the next batch, which it is holding: try again shortly.
    retry = full && !durable && !failure_ && !applier_stop_;
    applied_ += changes;
    drained_.notify_all();
  }
}

Error StateStore::write_failure(std::string_view why, bool behind_log) const {
  return Error(ErrorCode::not_applied,
               fmt::format("as_server could not save agent state to {}: {}; the call was not "
                           "applied. Everything acknowledged before is kept{}: fix the disk (free "
                           "space, permissions), then restart as_server",
                           file_, why,
                           behind_log ? fmt::format(" (in {} until the database holds it)", log_->path())
                                      : std::string()));
}

std::string StateStore::encode_batch(const std::vector<Pending>& batch, std::int64_t now_ms) {
  std::string out;
  auto put_int = [&](std::int64_t v) {
    char b[8];
    std::memcpy(b, &v, 8);
    out.append(b, 8);
  };
  put_int(now_ms);
  put_int(static_cast<std::int64_t>(batch.size()));
  for (const auto& p : batch) {
    const Change& c = p.change;
    out.push_back(static_cast<char>(c.kind));
    out.push_back(static_cast<char>((c.has_state ? 1 : 0) | (c.memory_reset ? 2 : 0)));
    put_int(c.memory_from);
    for (const std::string* f :
         {&c.agent_id, &c.name, &c.class_name, &c.args, &c.state, &c.memory, &c.call_id, &c.outcome})
      append_framed(out, *f);
  }
  return out;
}

std::vector<StateStore::Change> StateStore::decode_batch(std::string_view in, std::int64_t& now_ms) {
  auto take = [&](std::size_t n) {
    if (in.size() < n) throw std::runtime_error("a truncated commit record");
    auto part = in.substr(0, n);
    in.remove_prefix(n);
    return part;
  };
  auto get_int = [&] {
    std::int64_t v;
    std::memcpy(&v, take(8).data(), 8);
    return v;
  };
  now_ms = get_int();
  const std::int64_t count = get_int();
  if (count < 0 || static_cast<std::uint64_t>(count) > in.size())
    throw std::runtime_error("a bad commit record");
  std::vector<Change> out(static_cast<std::size_t>(count));
  for (auto& c : out) {
    const auto kind = static_cast<unsigned char>(take(1)[0]);
    if (kind > static_cast<unsigned char>(Change::Kind::call))
      throw std::runtime_error("a bad change in a commit record");
    c.kind = static_cast<Change::Kind>(kind);
    const auto flags = static_cast<unsigned char>(take(1)[0]);
    c.has_state = (flags & 1) != 0;
    c.memory_reset = (flags & 2) != 0;
    c.memory_from = get_int();
    for (std::string* f :
         {&c.agent_id, &c.name, &c.class_name, &c.args, &c.state, &c.memory, &c.call_id, &c.outcome})
      *f = std::string(take_framed(in, "a truncated commit record"));
  }
  if (!in.empty()) throw std::runtime_error("a commit record with bytes past its changes");
  return out;
}

void StateStore::sync_startup_write() {
  bool done = false;
  try {
    done = checkpoint();
  } catch (const std::exception& e) {
    throw Error(ErrorCode::config_error, fmt::format("{}: cannot sync: {}", file_, e.what()));
  }
  if (!done) throw busy_elsewhere();
}

bool StateStore::checkpoint() {
  int log_frames = 0;
  int copied = 0;
  const int rc = sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_TRUNCATE, &log_frames, &copied);
  if (rc == SQLITE_BUSY) return false;  // a reader (a backup) holds the write-ahead log: later
  if (rc != SQLITE_OK) throw std::runtime_error(fmt::format("checkpoint: {}", sqlite3_errmsg(db_)));
  return true;
}

void StateStore::trim_rows(const std::pair<std::size_t, std::int64_t>& trim, std::int64_t& forgotten) {
  Statements& s = *st_;
  // Results go oldest first. A row's seq is one more than the newest row's when it is written,
  // and only trims remove rows, so the rows are a range of seq and the newest max_results of
  // them are those after max(seq) - max_results (in a database whose results an earlier version
  // trimmed by age alone, the range may have gaps: then fewer are kept, never more). A row older
  // than max_age behind a newer one (the clock was set back) goes with the rows before it.
  std::int64_t over = 0;  // the rows up to this seq are past max_results
  if (s.newest_result.row()) {
    if (!s.newest_result.column_null(0))
      over = std::max<std::int64_t>(0, s.newest_result.column_int(0) - static_cast<std::int64_t>(trim.first));
    s.newest_result.stop();
  }
  // The walk reads the rows it removes and the first it keeps; what it forgets moves the
  // horizon (see the header).
  std::int64_t cut = 0;
  while (s.oldest_results.row()) {
    const std::int64_t seq = s.oldest_results.column_int(0);
    const std::int64_t finished = s.oldest_results.column_int(1);
    if (seq > over && finished >= trim.second) {
      s.oldest_results.stop();
      break;
    }
    cut = seq;
    forgotten = std::max(forgotten, finished);
  }
  if (cut == 0) return;
  s.trim_results.integer(1, cut).run();
  if (forgotten != forgotten_until_ms_)
    s.put_meta.text(1, "forgotten_until_ms").text(2, std::to_string(forgotten)).run();
}

void StateStore::apply(std::vector<Applying>& items,
                       const std::optional<std::pair<std::size_t, std::int64_t>>& trim) {
  Statements& s = *st_;
  s.begin.run();
  const Applying* numbered = nullptr;  // the last logged item
  try {
    for (const auto& item : items) {
      if (item.seq != 0) numbered = &item;
      for (const Change& c : item.changes) {
        switch (c.kind) {
          case Change::Kind::barrier:
            break;
          case Change::Kind::put_agent:
            s.put_agent.text(1, c.agent_id).text(2, c.name).text(3, c.class_name).blob(4, c.args);
            if (c.has_state)
              s.put_agent.blob(5, c.state);
            else
              s.put_agent.null(5);
            s.put_agent.run();
            s.delete_memory.text(1, c.agent_id).run();
            break;
          case Change::Kind::delete_agent:
            s.delete_agent.text(1, c.agent_id).run();
            s.delete_memory.text(1, c.agent_id).run();
            break;
          case Change::Kind::delete_all:
            s.delete_all_agents.run();
            s.delete_all_memory.run();
            break;
          case Change::Kind::call:
            if (c.has_state) s.set_state.text(1, c.agent_id).blob(2, c.state).run();
            if (c.memory_reset) s.delete_memory.text(1, c.agent_id).run();
            break;
        }
        if ((c.kind == Change::Kind::put_agent || c.kind == Change::Kind::call) && !c.memory.empty())
          s.put_memory.text(1, c.agent_id).integer(2, c.memory_from).blob(3, c.memory).run();
        if (writes_result(c))
          s.put_result.text(1, c.call_id)
              .text(2, c.agent_id)
              .blob(3, c.outcome)
              .integer(4, item.now_ms)
              .null(5)
              .run();
      }
    }
    std::int64_t forgotten = forgotten_until_ms_;
    if (trim) trim_rows(*trim, forgotten);
    if (numbered != nullptr) {
      // The last applied commit and where the log's next record starts, in the same transaction.
      s.put_meta.text(1, "commit_seq").text(2, std::to_string(numbered->seq)).run();
      s.put_meta.text(1, "redo_offset").text(2, std::to_string(numbered->end)).run();
    }
    s.commit.run();
    forgotten_until_ms_ = forgotten;
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  if (numbered != nullptr) applied_seq_ = numbered->seq;
}

}  // namespace agentd::detail
