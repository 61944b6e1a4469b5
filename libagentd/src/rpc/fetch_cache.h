// FetchCache: results this server fetched from other servers, kept so that several consumers of
// one placeholder here cost one transfer. Bounded both ways, the oldest dropped first: at most
// max_entries results and at most max_bytes of them (as the caller sizes them, about their wire
// size). A result over max_entry_bytes (or a quarter of max_bytes) is not kept at all: its
// consumers usually come at once and share the fetch in flight, and keeping it would cost more
// than fetching it again: every large result kept lands the next one in memory the process has
// never touched, and faulting that in costs about 0.4 ms per MiB on a VM (measured), a third of
// what the fetch itself takes (the README's "Where a call's time goes", W6). Loop thread only.
#pragma once

#include "result_pool.h"  // OutcomePtr

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>

namespace agentd::detail {

class FetchCache {
 public:
  FetchCache(std::size_t max_entries, std::size_t max_bytes, std::size_t max_entry_bytes)
      : max_entries_(max_entries),
        max_bytes_(max_bytes),
        max_entry_bytes_(std::min(max_entry_bytes, max_bytes / 4)) {}

  // The result kept under key, or nullptr.
  const OutcomePtr* find(const std::string& key) const {
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : &it->second.out;
  }

  // Keeps out under key (replacing what was there), unless it is too big; then drops the oldest
  // results until both bounds hold.
  void insert(const std::string& key, OutcomePtr out, std::size_t bytes) {
    erase(key);
    if (bytes > max_entry_bytes_ || max_entries_ == 0) return;
    entries_.emplace(key, Entry{std::move(out), bytes, ++seq_});
    order_.emplace_back(key, seq_);
    bytes_ += bytes;
    while (entries_.size() > max_entries_ || bytes_ > max_bytes_) {
      // order_ may name entries erased or replaced since: skip those.
      auto it = entries_.find(order_.front().first);
      if (it != entries_.end() && it->second.seq == order_.front().second) {
        bytes_ -= it->second.bytes;
        entries_.erase(it);
      }
      order_.pop_front();
    }
  }

  std::size_t size() const { return entries_.size(); }
  std::size_t bytes() const { return bytes_; }

 private:
  struct Entry {
    OutcomePtr out;
    std::size_t bytes = 0;
    std::uint64_t seq = 0;  // which insertion: order_ names it by key and seq
  };

  void erase(const std::string& key) {
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    bytes_ -= it->second.bytes;
    entries_.erase(it);
    // Its place in order_ goes when it reaches the front (or below, when order_ grows too long).
    if (order_.size() > 2 * max_entries_ + 16) compact();
  }

  void compact() {
    std::deque<std::pair<std::string, std::uint64_t>> kept;
    for (auto& o : order_)
      if (auto it = entries_.find(o.first); it != entries_.end() && it->second.seq == o.second)
        kept.push_back(std::move(o));
    order_ = std::move(kept);
  }

  const std::size_t max_entries_;
  const std::size_t max_bytes_;
  const std::size_t max_entry_bytes_;
  std::unordered_map<std::string, Entry> entries_;
  std::deque<std::pair<std::string, std::uint64_t>> order_;  // insertion order, oldest first
  std::size_t bytes_ = 0;
  std::uint64_t seq_ = 0;
};

}  // namespace agentd::detail
