// A valid shared object without agentd's entry point.
extern "C" int agentd_test_not_a_plugin() { return 42; }
