// The umbrella header: everything a plugin or a main program needs.
#pragma once

#include <agentd/agent.h>
#include <agentd/client.h>
#include <agentd/cluster.h>
#include <agentd/error.h>
#include <agentd/model.h>
#include <agentd/msg.h>
#include <agentd/tool.h>
#include <agentd/value.h>
#include <agentd/value_limits.h>
#include <agentd/version.h>
