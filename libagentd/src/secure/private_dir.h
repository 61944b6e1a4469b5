// PrivateDir: a fresh directory only this user can enter (mode 0700, under $TMPDIR or /tmp),
// removed with the files it holds when destroyed. Child mode hands its child the token in a file
// here, and the Unix socket it talks to the child over. Any one thread at a time.
#pragma once

#include <string>
#include <vector>

namespace agentd::detail {

class PrivateDir {
 public:
  // Throws Error(internal) saying why when the directory cannot be made.
  PrivateDir();
  ~PrivateDir();
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;

  const std::string& path() const { return path_; }
  // Writes text to path()/name with mode 0600 and returns the file's path. Throws Error(internal).
  std::string write_private(const std::string& name, const std::string& text);
  // path()/name, to be removed with the directory (e.g. a socket another process makes there).
  std::string add_file(const std::string& name);
  // Removes a file of this directory now.
  void remove(const std::string& file);

 private:
  std::string path_;
  std::vector<std::string> files_;
};

}  // namespace agentd::detail
