// Two dialog agents on two servers talking, in AgentScope's conversation loop:
//
//   x = None
//   while x is None or x.content != "exit":
//       x = alice(x)
//       x = bob(x)
//
// Each agent lives on its own as_server child process (child mode); Bob's call gets Alice's
// answer as a placeholder and fetches it from Alice's server directly. Both replies are
// streamed: their words are printed as the model produces them (reply_stream + chunks()),
// while Bob's server still receives Alice's whole message. The loop is also bounded
// by --rounds, so with the built-in echo model (which only repeats what it hears) it ends too.
//
//   dialog_demo [--model-config-path FILE] [--model-config-name NAME] [--rounds N]
//               [--message TEXT] [--plugin-dir DIR]
#include <agentd/agentd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

namespace {

struct Options {
  std::string model_config_path = AGENTD_DIALOG_DEFAULT_MODEL_CONFIG;
  std::string model_config_name = "echo";
  int rounds = 3;
  std::string message = "Hi! Shall we plan a trip together? Say exit when you are done.";
  std::string plugin_dir = AGENTD_DIALOG_PLUGIN_DIR;
};

void usage() {
  std::cout << "Usage: dialog_demo [options]\n"
               "  --model-config-path FILE  model configs for both servers (default: the example\n"
               "                            config/models.yaml of the source tree)\n"
               "  --model-config-name NAME  the config both agents use (default: echo, no network)\n"
               "  --rounds N                at most N rounds of Alice then Bob (default 3)\n"
               "  --message TEXT            what the user says first\n"
               "  --plugin-dir DIR          where libdialog_agents.so is\n";
}

void print(const agentd::Msg& m) {
  std::printf("%s: %s\n", m.name.c_str(), m.text().c_str());
  std::fflush(stdout);
}

// Prints a streamed reply as its chunks arrive, then returns the whole message.
agentd::Msg print_streamed(const std::string& name, const agentd::Placeholder& p) {
  std::printf("%s: ", name.c_str());
  std::fflush(stdout);
  for (const std::string& chunk : p.chunks()) {
    std::fwrite(chunk.data(), 1, chunk.size(), stdout);
    std::fflush(stdout);
  }
  std::printf("\n");
  return p.get();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "dialog_demo: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model-config-path")
      o.model_config_path = next();
    else if (a == "--model-config-name")
      o.model_config_name = next();
    else if (a == "--rounds")
      o.rounds = std::atoi(next().c_str());
    else if (a == "--message")
      o.message = next();
    else if (a == "--plugin-dir")
      o.plugin_dir = next();
    else if (a == "--help" || a == "-h") {
      usage();
      return 0;
    } else {
      std::cerr << "dialog_demo: unknown option " << a << " (see --help)\n";
      return 2;
    }
  }
  if (o.rounds < 1) {
    std::cerr << "dialog_demo: --rounds must be at least 1\n";
    return 2;
  }

  try {
    // main() is the wiring diagram: two servers, one agent on each.
    agentd::ChildOptions child;
    child.plugins = {o.plugin_dir + "/libdialog_agents.so"};
    child.model_config_path = o.model_config_path;
    agentd::Client server1 = agentd::Client::spawn_child(child);
    agentd::Client server2 = agentd::Client::spawn_child(child);

    agentd::AgentRef alice = server1.create_agent(
        "DialogAgent", "Alice",
        agentd::Value{{"sys_prompt", "You are Alice, a cheerful travel planner. Keep answers short."},
                      {"model_config_name", o.model_config_name}});
    agentd::AgentRef bob = server2.create_agent(
        "DialogAgent", "Bob",
        agentd::Value{{"sys_prompt", "You are Bob, a careful budget keeper. Say exit when the plan is done."},
                      {"model_config_name", o.model_config_name}});
    std::printf("Alice on %s, Bob on %s, model config '%s'\n\n", server1.address().c_str(),
                server2.address().c_str(), o.model_config_name.c_str());

    agentd::Msg x("user", o.message, "user");
    print(x);
    int round = 0;
    do {  // as AgentScope's loop: the user's opening line is not checked, Bob's answers are
      ++round;
      agentd::Placeholder a = alice.reply_stream(x);  // returns at once
      agentd::Placeholder b = bob.reply_stream(a);    // Bob's server fetches Alice's answer from hers
      print_streamed(alice.name(), a);
      x = print_streamed(bob.name(), b);
    } while (x.text() != "exit" && round < o.rounds);
    std::printf("\n%s after %d round%s.\n", x.text() == "exit" ? "Bob said exit" : "Round limit reached",
                round, round == 1 ? "" : "s");

    for (auto* agent : {&alice, &bob}) {
      agentd::Value u = agent->call("usage");
      std::printf("%s: %s model calls, %s tokens\n", agent->name().c_str(), u["calls"].dump().c_str(),
                  u["total_tokens"].dump().c_str());
    }
    return 0;
  } catch (const agentd::Error& e) {
    std::cerr << "dialog_demo: " << e.what() << "\n";
    return 1;
  }
}
