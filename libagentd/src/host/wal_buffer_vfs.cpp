#include "wal_buffer_vfs.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <algorithm>
#include <new>
#include <stdexcept>
#include <vector>

namespace agentd::detail {

namespace {

constexpr std::size_t round8(std::size_t n) { return (n + 7) & ~std::size_t{7}; }

constexpr int kFrameHeader = 24;  // a WAL frame's header; its bytes 4..7: the database size after a commit

}  // namespace

// A WAL file: SQLite's sqlite3_file first, the default VFS's file after it (at real_at()).
struct WalBufferVfs::WalFile {
  sqlite3_file file{};  // pMethods = &kMethods; must stay first
  WalBufferVfs* owner;
  sqlite3_file* real;
  std::vector<unsigned char> gathered;
  sqlite3_int64 gathered_at = 0;  // the file offset of gathered[0]
  bool commit_page_next = false;  // the last write was a commit frame's header

  // Where the default VFS's file starts.
  static std::size_t real_at() { return round8(sizeof(WalFile)); }

  static WalFile& of(sqlite3_file* f) { return *reinterpret_cast<WalFile*>(f); }
  static sqlite3_file* real_of(sqlite3_file* f) { return of(f).real; }

  // Forwards an operation to the default VFS's file once the gathered writes are in the file.
  template <typename Op>
  static int flushed_then(sqlite3_file* f, Op op) {
    if (const int rc = of(f).flush(); rc != SQLITE_OK) return rc;
    return op(of(f).real);
  }

  int flush() {
    if (gathered.empty()) return SQLITE_OK;
    owner->made_.fetch_add(1, std::memory_order_relaxed);
    const int rc =
        real->pMethods->xWrite(real, gathered.data(), static_cast<int>(gathered.size()), gathered_at);
    // Cleared on failure too: SQLite rolls the transaction back, and frames it never published
    // in the WAL index are not read.
    gathered.clear();
    return rc;
  }

  int write(const void* data, int n, sqlite3_int64 at) {
    owner->asked_.fetch_add(1, std::memory_order_relaxed);
    const auto size = static_cast<sqlite3_int64>(gathered.size());
    if (!gathered.empty() && (at != gathered_at + size || gathered.size() + n > kMaxGathered)) {
      if (const int rc = flush(); rc != SQLITE_OK) return rc;
    }
    const bool commit_page = commit_page_next;
    const auto* bytes = static_cast<const unsigned char*>(data);
    commit_page_next = n == kFrameHeader && (bytes[4] | bytes[5] | bytes[6] | bytes[7]) != 0;
    try {
      if (gathered.empty()) gathered_at = at;
      gathered.insert(gathered.end(), bytes, bytes + n);
    } catch (const std::bad_alloc&) {
      // No memory to gather into: what is gathered goes first, then this write as it came.
      if (const int rc = flush(); rc != SQLITE_OK) return rc;
      owner->made_.fetch_add(1, std::memory_order_relaxed);
      return real->pMethods->xWrite(real, data, n, at);
    }
    if (commit_page || gathered.size() >= kMaxGathered) return flush();
    return SQLITE_OK;
  }

  static const sqlite3_io_methods kMethods;
};

const sqlite3_io_methods WalBufferVfs::WalFile::kMethods = {
    3,  // iVersion: up to xFetch/xUnfetch
    // xClose
    [](sqlite3_file* f) {
      WalFile& w = WalFile::of(f);
      const int flushed = w.flush();
      const int closed = w.real->pMethods != nullptr ? w.real->pMethods->xClose(w.real) : SQLITE_OK;
      w.~WalFile();
      return flushed != SQLITE_OK ? flushed : closed;
    },
    // xRead
    [](sqlite3_file* f, void* out, int n, sqlite3_int64 at) {
      return flushed_then(f, [&](sqlite3_file* r) { return r->pMethods->xRead(r, out, n, at); });
    },
    // xWrite
    [](sqlite3_file* f, const void* data, int n, sqlite3_int64 at) {
      return WalFile::of(f).write(data, n, at);
    },
    // xTruncate
    [](sqlite3_file* f, sqlite3_int64 size) {
      return flushed_then(f, [&](sqlite3_file* r) { return r->pMethods->xTruncate(r, size); });
    },
    // xSync
    [](sqlite3_file* f, int flags) {
      return flushed_then(f, [&](sqlite3_file* r) { return r->pMethods->xSync(r, flags); });
    },
    // xFileSize
    [](sqlite3_file* f, sqlite3_int64* size) {
      return flushed_then(f, [&](sqlite3_file* r) { return r->pMethods->xFileSize(r, size); });
    },
    // xLock, xUnlock, xCheckReservedLock
    [](sqlite3_file* f, int lock) { return real_of(f)->pMethods->xLock(real_of(f), lock); },
    [](sqlite3_file* f, int lock) { return real_of(f)->pMethods->xUnlock(real_of(f), lock); },
    [](sqlite3_file* f, int* out) { return real_of(f)->pMethods->xCheckReservedLock(real_of(f), out); },
    // xFileControl
    [](sqlite3_file* f, int op, void* arg) {
      return flushed_then(f, [&](sqlite3_file* r) { return r->pMethods->xFileControl(r, op, arg); });
    },
    // xSectorSize, xDeviceCharacteristics
    [](sqlite3_file* f) { return real_of(f)->pMethods->xSectorSize(real_of(f)); },
    [](sqlite3_file* f) { return real_of(f)->pMethods->xDeviceCharacteristics(real_of(f)); },
    // xShmMap, xShmLock, xShmBarrier, xShmUnmap (SQLite uses the database file's, not the WAL's)
    [](sqlite3_file* f, int page, int size, int extend, void volatile** out) {
      sqlite3_file* r = real_of(f);
      return r->pMethods->iVersion >= 2 ? r->pMethods->xShmMap(r, page, size, extend, out)
                                        : SQLITE_IOERR_SHMMAP;
    },
    [](sqlite3_file* f, int offset, int n, int flags) {
      sqlite3_file* r = real_of(f);
      return r->pMethods->iVersion >= 2 ? r->pMethods->xShmLock(r, offset, n, flags) : SQLITE_IOERR_SHMLOCK;
    },
    [](sqlite3_file* f) {
      sqlite3_file* r = real_of(f);
      if (r->pMethods->iVersion >= 2) r->pMethods->xShmBarrier(r);
    },
    [](sqlite3_file* f, int remove) {
      sqlite3_file* r = real_of(f);
      return r->pMethods->iVersion >= 2 ? r->pMethods->xShmUnmap(r, remove) : SQLITE_OK;
    },
    // xFetch, xUnfetch (memory-mapped reads: none of a WAL file, but kept whole)
    [](sqlite3_file* f, sqlite3_int64 at, int n, void** out) {
      *out = nullptr;
      return flushed_then(f, [&](sqlite3_file* r) {
        return r->pMethods->iVersion >= 3 ? r->pMethods->xFetch(r, at, n, out) : SQLITE_OK;
      });
    },
    [](sqlite3_file* f, sqlite3_int64 at, void* p) {
      sqlite3_file* r = real_of(f);
      return r->pMethods->iVersion >= 3 ? r->pMethods->xUnfetch(r, at, p) : SQLITE_OK;
    },
};

int WalBufferVfs::open(sqlite3_vfs* vfs, const char* name, sqlite3_file* file, int flags, int* out_flags) {
  auto* self = static_cast<WalBufferVfs*>(vfs->pAppData);
  sqlite3_vfs* base = self->base_;
  // Not a WAL file: the default VFS's own file, in the space SQLite gave (ours is larger).
  if ((flags & SQLITE_OPEN_WAL) == 0) return base->xOpen(base, name, file, flags, out_flags);
  auto* real = reinterpret_cast<sqlite3_file*>(reinterpret_cast<char*>(file) + WalFile::real_at());
  real->pMethods = nullptr;
  const int rc = base->xOpen(base, name, real, flags, out_flags);
  if (rc != SQLITE_OK) {
    // The default VFS asks for xClose when it set its methods even though it failed.
    if (real->pMethods != nullptr) real->pMethods->xClose(real);
    file->pMethods = nullptr;
    return rc;
  }
  auto* w = new (file) WalFile();
  w->owner = self;
  w->real = real;
  w->file.pMethods = &WalFile::kMethods;
  return SQLITE_OK;
}

sqlite3_vfs* WalBufferVfs::base_of(sqlite3_vfs* vfs) {
  return static_cast<WalBufferVfs*>(vfs->pAppData)->base_;
}

WalBufferVfs::WalBufferVfs() : vfs_(std::make_unique<sqlite3_vfs>()) {
  // Registering initializes SQLite first; the default VFS is found after it.
  if (sqlite3_initialize() != SQLITE_OK || (base_ = sqlite3_vfs_find(nullptr)) == nullptr)
    throw std::runtime_error("SQLite has no default VFS to write with");
  name_ = fmt::format("agentd-wal-buffer-{}", static_cast<const void*>(this));
  sqlite3_vfs& v = *vfs_;
  v = sqlite3_vfs{};
  v.iVersion = std::min(base_->iVersion, 3);
  v.szOsFile = static_cast<int>(WalFile::real_at() + static_cast<std::size_t>(base_->szOsFile));
  v.mxPathname = base_->mxPathname;
  v.zName = name_.c_str();
  v.pAppData = this;
  v.xOpen = &WalBufferVfs::open;
  v.xDelete = [](sqlite3_vfs* s, const char* n, int sync) {
    return base_of(s)->xDelete(base_of(s), n, sync);
  };
  v.xAccess = [](sqlite3_vfs* s, const char* n, int f, int* out) {
    return base_of(s)->xAccess(base_of(s), n, f, out);
  };
  v.xFullPathname = [](sqlite3_vfs* s, const char* n, int size, char* out) {
    return base_of(s)->xFullPathname(base_of(s), n, size, out);
  };
  v.xDlOpen = [](sqlite3_vfs* s, const char* n) { return base_of(s)->xDlOpen(base_of(s), n); };
  v.xDlError = [](sqlite3_vfs* s, int n, char* out) { base_of(s)->xDlError(base_of(s), n, out); };
  v.xDlSym = [](sqlite3_vfs* s, void* h, const char* n) { return base_of(s)->xDlSym(base_of(s), h, n); };
  v.xDlClose = [](sqlite3_vfs* s, void* h) { base_of(s)->xDlClose(base_of(s), h); };
  v.xRandomness = [](sqlite3_vfs* s, int n, char* out) {
    return base_of(s)->xRandomness(base_of(s), n, out);
  };
  v.xSleep = [](sqlite3_vfs* s, int us) { return base_of(s)->xSleep(base_of(s), us); };
  v.xCurrentTime = [](sqlite3_vfs* s, double* out) { return base_of(s)->xCurrentTime(base_of(s), out); };
  v.xGetLastError = [](sqlite3_vfs* s, int n, char* out) {
    return base_of(s)->xGetLastError(base_of(s), n, out);
  };
  if (v.iVersion >= 2)
    v.xCurrentTimeInt64 = [](sqlite3_vfs* s, sqlite3_int64* out) {
      return base_of(s)->xCurrentTimeInt64(base_of(s), out);
    };
  if (v.iVersion >= 3) {
    v.xSetSystemCall = [](sqlite3_vfs* s, const char* n, sqlite3_syscall_ptr p) {
      return base_of(s)->xSetSystemCall(base_of(s), n, p);
    };
    v.xGetSystemCall = [](sqlite3_vfs* s, const char* n) {
      return base_of(s)->xGetSystemCall(base_of(s), n);
    };
    v.xNextSystemCall = [](sqlite3_vfs* s, const char* n) {
      return base_of(s)->xNextSystemCall(base_of(s), n);
    };
  }
  if (const int rc = sqlite3_vfs_register(vfs_.get(), 0); rc != SQLITE_OK)
    throw std::runtime_error(fmt::format("SQLite refused the WAL-gathering VFS: {}", sqlite3_errstr(rc)));
}

WalBufferVfs::~WalBufferVfs() { sqlite3_vfs_unregister(vfs_.get()); }

}  // namespace agentd::detail
