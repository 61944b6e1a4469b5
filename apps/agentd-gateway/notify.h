// systemd's notify protocol (sd_notify(3)), as much as the gateway needs: READY=1 once it
// listens, STOPPING=1 when it stops. A datagram to $NOTIFY_SOCKET (a path, or "@name" in the
// abstract namespace); nothing when the variable is unset (not run by systemd).
#pragma once

#include <string>

namespace gateway {

// Sends state (lines "KEY=VALUE\n") to $NOTIFY_SOCKET. False when unset or the send failed.
bool sd_notify(const std::string& state);

}  // namespace gateway
