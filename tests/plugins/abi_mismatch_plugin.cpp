// A plugin that claims a plugin ABI this libagentd does not have: as_server must refuse it.
#include <agentd/agent.h>

namespace {

class OldAgent : public agentd::Agent {
 public:
  using Agent::Agent;
  agentd::Msg reply(const agentd::Msg& x) override { return x; }
};

struct ClaimOtherAbi {
  ClaimOtherAbi() {
    agentd::detail::this_module_plugin_table().abi_version = AGENTD_ABI_VERSION + 998;
    agentd::detail::this_module_plugin_table().agentd_version = "9.9.9";
  }
};
const ClaimOtherAbi claim_other_abi;

}  // namespace

AGENTD_REGISTER_AGENT(OldAgent);
