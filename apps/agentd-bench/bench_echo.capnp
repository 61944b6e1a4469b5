# The bare Cap'n Proto baseline of agentd-bench: the same RPC stack (TwoPartyServer /
# TwoPartyClient over loopback TCP) with no agentd logic behind it.
@0xa6a49aa65b3da91f;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("agentd::bench::wire");

interface BenchEcho {
  echo @0 (payload :Data) -> (payload :Data);
}
