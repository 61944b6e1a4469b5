// The plugin libdialog_agents.so: registers the built-in model agents under their short names.
#include "dialog_agents.h"

using agentd::dialog::DialogAgent;
using agentd::dialog::ReActAgent;

AGENTD_REGISTER_AGENT(DialogAgent);
AGENTD_REGISTER_AGENT(ReActAgent);
