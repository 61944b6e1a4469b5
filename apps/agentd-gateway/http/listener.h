// Accepts HTTP connections on one address and starts a Connection (on a strand of its own) for
// each, up to a maximum number open at once (one more is closed at once). With a TLS context
// every connection speaks HTTPS.
#pragma once

#include "http/connection.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <cstddef>
#include <memory>

namespace gateway::http {

class Listener : public std::enable_shared_from_this<Listener> {
 public:
  // Binds and listens; throws boost::system::system_error when it cannot. tls: null for plain
  // HTTP (see http/tls.h).
  Listener(asio::io_context& ioc, const asio::ip::tcp::endpoint& at, Limits limits,
           std::size_t max_connections, Handler handler, std::shared_ptr<asio::ssl::context> tls = nullptr);
  bool tls() const { return tls_ != nullptr; }
  asio::ip::tcp::endpoint local_endpoint() const { return acceptor_.local_endpoint(); }
  void start();
  void stop();

 private:
  void accept();

  asio::io_context& ioc_;
  asio::ip::tcp::acceptor acceptor_;
  asio::steady_timer retry_;     // after a failed accept (out of descriptors)
  bool accept_failing_ = false;  // on the acceptor's strand
  Limits limits_;
  std::size_t max_connections_;
  std::shared_ptr<const Handler> handler_;   // shared with the connections, which may outlive this
  std::shared_ptr<asio::ssl::context> tls_;  // likewise
  std::shared_ptr<std::atomic<std::size_t>> open_ = std::make_shared<std::atomic<std::size_t>>(0);
};

}  // namespace gateway::http
