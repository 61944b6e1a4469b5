#include "http/listener.h"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/strand.hpp>

#include <iostream>

namespace gateway::http {

Listener::Listener(asio::io_context& ioc, const asio::ip::tcp::endpoint& at, Limits limits,
                   std::size_t max_connections, Handler handler, std::shared_ptr<asio::ssl::context> tls)
    : ioc_(ioc),
      acceptor_(asio::make_strand(ioc)),
      retry_(acceptor_.get_executor()),
      limits_(limits),
      max_connections_(max_connections),
      handler_(std::make_shared<const Handler>(std::move(handler))),
      tls_(std::move(tls)) {
  acceptor_.open(at.protocol());
  acceptor_.set_option(asio::socket_base::reuse_address(true));
  acceptor_.bind(at);
  acceptor_.listen(asio::socket_base::max_listen_connections);
}

void Listener::start() {
  asio::dispatch(acceptor_.get_executor(), [self = shared_from_this()] { self->accept(); });
}

void Listener::stop() {
  asio::dispatch(acceptor_.get_executor(), [self = shared_from_this()] {
    beast::error_code ignored;
    self->acceptor_.close(ignored);
    self->retry_.cancel();
  });
}

void Listener::accept() {
  // Each connection gets a strand of its own.
  acceptor_.async_accept(asio::make_strand(ioc_), [self = shared_from_this()](beast::error_code ec,
                                                                              asio::ip::tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !self->acceptor_.is_open()) return;
    if (ec) {
      // Out of descriptors and the like: keep serving the connections there are and try again
      // in a moment (logged once per series of failures).
      if (!self->accept_failing_)
        std::cerr << "agentd-gateway: accept failed: " << ec.message() << "; retrying every 100 ms\n";
      self->accept_failing_ = true;
      self->retry_.expires_after(std::chrono::milliseconds(100));
      self->retry_.async_wait([self](beast::error_code) { self->accept(); });
      return;
    }
    self->accept_failing_ = false;
    if (self->open_->load() >= self->max_connections_) {
      beast::error_code ignored;
      socket.close(ignored);  // over --max-connections
    } else {
      self->open_->fetch_add(1);
      std::make_shared<Connection>(std::move(socket), self->tls_, self->limits_, self->handler_, self->open_)
          ->start();
    }
    self->accept();
  });
}

}  // namespace gateway::http
