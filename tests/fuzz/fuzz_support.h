// Helpers shared by the libFuzzer targets (tests/fuzz). Header-only; each target is its own
// executable with its own LLVMFuzzerTestOneInput.
#pragma once

#include <capnp/serialize.h>
#include <kj/array.h>

#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <string_view>

namespace agentd::fuzz {

// The fuzz input copied into word-aligned memory, as Cap'n Proto's flat-array reader needs it
// (libFuzzer's buffer has no alignment guarantee). Bytes past the last whole word are dropped.
inline kj::Array<capnp::word> aligned_words(const std::uint8_t* data, std::size_t size) {
  auto words = kj::heapArray<capnp::word>(size / sizeof(capnp::word));
  if (words.size() > 0) std::memcpy(words.begin(), data, words.size() * sizeof(capnp::word));
  return words;
}

// Reader limits for a fuzz input read as a message. Small traversal limit: a few bytes can claim a
// list of millions of empty structs (capnp charges one word per element), which would make one
// input take seconds without finding anything new.
inline capnp::ReaderOptions fuzz_reader_options() {
  capnp::ReaderOptions o;
  o.traversalLimitInWords = 64 * 1024;
  o.nestingLimit = 64;
  return o;
}

// A broken invariant: print it and abort, which libFuzzer reports as a crash with the input.
[[noreturn]] inline void invariant_failed(const char* what) {
  std::fprintf(stderr, "fuzz invariant failed: %s\n", what);
  std::abort();
}

}  // namespace agentd::fuzz
