// The names nearly every test uses, gathered once: a test file includes this and says
// `using namespace agentd::test;` instead of repeating the same using-declarations.
#pragma once

#include <agentd/client.h>
#include <agentd/error.h>
#include <agentd/msg.h>
#include <agentd/value.h>

#include <catch2/catch.hpp>

#include <chrono>

namespace agentd::test {

using agentd::AgentRef;
using agentd::Client;
using agentd::ClientOptions;
using agentd::Error;
using agentd::ErrorCode;
using agentd::Msg;
using agentd::Placeholder;
using agentd::Value;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

}  // namespace agentd::test
