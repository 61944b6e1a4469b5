// Local mode (Client::local): a Server in this process, reached over its bootstrap capability on
// the client's loop thread: no socket. Here, above both the client and the server, so that the
// client library does not contain the server.
#include <agentd/client.h>

#include "client_core.h"
#include "pooled_connector.h"
#include "server.h"

#include <kj/async-io.h>

#include <string>

namespace agentd {

namespace {

detail::ServerOptions server_options(const LocalOptions& local) {
  detail::ServerOptions so;
  so.plugins = local.plugins;
  so.plugin_dirs = local.plugin_dirs;
  so.model_config_path = local.model_config_path;
  so.max_workers = local.max_workers;
  so.server_id = "local-" + new_id().substr(0, 8);
  return so;
}

// The server a local client talks to; made and destroyed on the client's loop thread.
class LocalServer final : public detail::ClientCore::InProcess {
 public:
  LocalServer(const LocalOptions& local, kj::AsyncIoContext& io)
      : server_(server_options(local), io, local.classes, detail::pooled_agent_connector()) {}
  wire::AgentServer::Client bootstrap() override { return server_.bootstrap(); }
  std::string server_id() const override { return server_.id(); }
  kj::Promise<void> run() override { return server_.run(); }

 private:
  detail::Server server_;
};

}  // namespace

Client Client::local(LocalOptions options) {
  detail::ClientCore::Target t;
  t.mode = detail::ClientCore::Mode::local;
  ClientOptions copts = options.client;
  t.in_process = [local =
                      std::move(options)](kj::AsyncIoContext& io) -> kj::Own<detail::ClientCore::InProcess> {
    return kj::heap<LocalServer>(local, io);
  };
  return Client(std::make_shared<detail::ClientCore>(std::move(t), copts));
}

}  // namespace agentd
