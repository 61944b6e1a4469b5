// A well-formed plugin that registers no agent classes: as_server must refuse it.
#include <agentd/agent.h>
