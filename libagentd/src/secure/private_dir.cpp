#include "private_dir.h"

#include <agentd/error.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace agentd::detail {

PrivateDir::PrivateDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = fmt::format("{}/agentd-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (::mkdtemp(templ.data()) == nullptr)  // mkdtemp makes it 0700
    throw Error(ErrorCode::internal,
                fmt::format("cannot make a private directory {}: {}", templ, std::strerror(errno)));
  path_ = templ;
}

PrivateDir::~PrivateDir() {
  for (const auto& f : files_) ::unlink(f.c_str());
  ::rmdir(path_.c_str());
}

std::string PrivateDir::add_file(const std::string& name) {
  files_.push_back(path_ + "/" + name);
  return files_.back();
}

void PrivateDir::remove(const std::string& file) {
  ::unlink(file.c_str());
  files_.erase(std::remove(files_.begin(), files_.end(), file), files_.end());
}

std::string PrivateDir::write_private(const std::string& name, const std::string& text) {
  std::string file = path_ + "/" + name;
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    throw Error(ErrorCode::internal, fmt::format("cannot write {}: {}", file, std::strerror(errno)));
  files_.push_back(file);
  std::size_t done = 0;
  while (done < text.size()) {
    auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw Error(ErrorCode::internal, fmt::format("cannot write {}: {}", file, std::strerror(err)));
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return file;
}

}  // namespace agentd::detail
