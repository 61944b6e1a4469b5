// A plain HTTP/1.1 request to 127.0.0.1:port over a socket (the metrics endpoint's tests).
#pragma once

#include "loopback.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace agentd::test {

// Sends request to 127.0.0.1:port over a plain socket; returns everything the server sent back
// (it closes the connection after one response).
inline std::string http(std::uint16_t port, const std::string& request) {
  const int fd = connect_loopback(port);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  // Two writes: the server must wait for the whole head.
  auto half = request.size() / 2;
  ::send(fd, request.data(), half, MSG_NOSIGNAL);
  ::send(fd, request.data() + half, request.size() - half, MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  for (;;) {
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

inline std::string get(std::uint16_t port, const std::string& path) {
  return http(port, "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n");
}

// The body of an HTTP response.
inline std::string body_of(const std::string& response) {
  auto end = response.find("\r\n\r\n");
  return end == std::string::npos ? std::string{} : response.substr(end + 4);
}

}  // namespace agentd::test
