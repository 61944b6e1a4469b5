// The agents of the guess-2/3-of-the-average simulation (AgentScope's "Very Large-Scale
// Multi-Agent Simulation"), as the plugin libsimulation_agents.so:
//
//   ParticipantAgent  on reply: waits a simulated model latency, then guesses an integer in
//                     [0, 100] (reproducibly at random, or by asking a model), and remembers it.
//   GroupAgent        holds references to participants on its own server; a game round is two
//                     methods: "guess" (fans out one reply to every participant, returns the sum
//                     and count of their guesses) and "closest" (the participant whose guess of
//                     the last round is closest to a target, from the guesses kept by "guess").
//
// Both are asynchronous agents: a million participants waiting on their latency hold no thread.
// Memory matters at that scale: participants keep a few numbers, not their messages.
#include <agentd/agent.h>
#include <agentd/client.h>
#include <agentd/error.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr const char* kDefaultPrompt =
    "You are one of many players of a game. Every player guesses an integer between 0 and 100; "
    "the player whose guess is closest to two thirds of the average of all guesses wins. "
    "Answer with your guess only.";

std::int64_t int_arg(const agentd::Value& v, const char* key, std::int64_t fallback, std::int64_t min) {
  if (!v.is_object() || !v.contains(key)) return fallback;
  if (!v[key].is_number_integer() || v[key].get<std::int64_t>() < min)
    throw agentd::Error(agentd::ErrorCode::bad_args,
                        std::string(key) + " must be an integer >= " + std::to_string(min));
  return v[key].get<std::int64_t>();
}

// FNV-1a: a hash that is the same on every platform and run (std::hash is not), so a seed and
// a name give the same guesses everywhere.
std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The first number in text (an optional '-', digits, an optional fraction), rounded and
// clamped to [0, 100]; nullopt when text holds no number.
std::optional<int> first_number_clamped(std::string_view text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') continue;
    std::size_t start = i;
    if (start > 0 && text[start - 1] == '-') --start;
    std::string token(text.substr(start, 32));
    double v = std::strtod(token.c_str(), nullptr);
    if (!std::isfinite(v)) v = v < 0 ? 0 : 100;
    return static_cast<int>(std::lround(std::clamp(v, 0.0, 100.0)));
  }
  return std::nullopt;
}

// Ordinary functions (not coroutines) build values with braces: GCC 12 miscompiles braced
// lists inside coroutine bodies (README, "Asynchronous agents").
std::vector<agentd::Msg> prompt_messages(const std::string& prompt) {
  return std::vector<agentd::Msg>{agentd::Msg("user", prompt, "user")};
}

agentd::Value participant_state(std::uint32_t guesses, int last, std::int64_t round,
                                std::uint32_t fallbacks) {
  return agentd::Value{
      {"guesses", guesses}, {"last", last}, {"round", round}, {"model_fallbacks", fallbacks}};
}

agentd::Value sum_count(std::int64_t sum, std::int64_t count) {
  return agentd::Value{{"sum", sum}, {"count", count}};
}

agentd::Value closest_answer(const std::string& name, int guess, double distance) {
  return agentd::Value{{"name", name}, {"guess", guess}, {"distance", distance}};
}

agentd::Value member_row(const agentd::AgentRef& r, int guess) {
  return agentd::Value{{"id", r.id()}, {"name", r.name()}, {"guess", guess}};
}

}  // namespace

// Args (all optional): {"latency_ms": simulated model latency before each guess (default 1000),
//   "seed": seed of the random guesses (default 0), "model": a model config name to ask instead
//   of guessing at random, "prompt": the question put to that model}.
// Input: the round number (any other input counts as round 0). Reply: the guess, an integer.
// Method "state": {"guesses": replies so far, "last": the last guess (-1: none), "round": the
// last round, "model_fallbacks": model answers without a number (a random guess stood in)}.
class ParticipantAgent : public agentd::AsyncAgent {
 public:
  explicit ParticipantAgent(agentd::AgentInit init) : AsyncAgent(std::move(init)) {
    latency_ms_ = static_cast<std::uint32_t>(int_arg(args(), "latency_ms", 1000, 0));
    int_arg(args(), "seed", 0, std::numeric_limits<std::int64_t>::min());  // checks its type
    if (args().is_object() && args().contains("model")) {
      if (!args()["model"].is_string())
        throw agentd::Error(agentd::ErrorCode::bad_args, "model must be a model config name");
      asks_model_ = true;
    }
  }

  agentd::Task<agentd::Msg> reply_async(const agentd::Msg& x) override {
    const std::int64_t round = x.content.is_number_integer() ? x.content.get<std::int64_t>() : 0;
    if (latency_ms_ > 0) co_await agentd::sleep_for(std::chrono::milliseconds(latency_ms_));
    int guess = 0;
    // The model's exchange lives in its own coroutine: this frame, alive while the participant
    // waits out its latency, stays small (a million of them wait at once).
    if (asks_model_) {
      guess = co_await ask_model(round);
    } else {
      guess = random_guess(round);
    }
    last_ = static_cast<std::int16_t>(guess);
    round_ = static_cast<std::int32_t>(round);
    ++guesses_;
    // Nothing goes to memory(): a participant replies every round, and a million memories that
    // grow each round would be the server's largest cost.
    co_return agentd::Msg(name(), agentd::Value(guess));
  }

  agentd::Task<agentd::Value> call_async(const std::string& method, const agentd::Value& a) override {
    if (method == "state") co_return participant_state(guesses_, last_, round_, fallbacks_);
    co_return co_await AsyncAgent::call_async(method, a);
  }

 private:
  // Asks the model; the first number of its answer, clamped to [0, 100], or the random guess
  // when the answer holds none (counted in model_fallbacks).
  agentd::Task<int> ask_model(std::int64_t round) {
    auto m = model(args()["model"].get<std::string>());
    std::vector<agentd::Msg> question = prompt_messages(args().value("prompt", std::string(kDefaultPrompt)));
    agentd::ChatResponse answer = co_await m->chat_async(std::move(question));
    if (auto parsed = first_number_clamped(answer.msg.text())) co_return *parsed;
    ++fallbacks_;
    co_return random_guess(round);
  }

  int random_guess(std::int64_t round) const {
    const auto seed = static_cast<std::uint64_t>(args().value("seed", std::int64_t(0)));
    const std::uint64_t h =
        splitmix64(seed ^ splitmix64(fnv1a(name()) ^ splitmix64(static_cast<std::uint64_t>(round))));
    return static_cast<int>(h % 101);
  }

  std::uint32_t latency_ms_ = 1000;
  std::uint32_t guesses_ = 0;
  std::uint32_t fallbacks_ = 0;
  std::int32_t round_ = -1;
  std::int16_t last_ = -1;
  bool asks_model_ = false;
};
AGENTD_REGISTER_AGENT(ParticipantAgent);

// Args: {"participants": [AgentRef::to_value(), ...]}: its participants, on this server (a
// group on another server works too, but its calls then cross servers).
// Methods (call_async):
//   "connect"  connects to the participants (the first call of any method does it too); returns
//              their count. The simulation calls it while setting up, so rounds do not pay it.
//   "guess"    {"round": r}: sends r to every participant at once (all replies issued, then each
//              awaited), keeps their guesses, returns {"sum", "count"}.
//   "closest"  {"target": t}: {"name", "guess", "distance"} of the participant whose guess of the
//              last "guess" is closest to t (the first such in order); no participant calls.
//   "members"  [{"id", "name", "guess"}] of its participants, in order.
class GroupAgent : public agentd::AsyncAgent {
 public:
  explicit GroupAgent(agentd::AgentInit init) : AsyncAgent(std::move(init)) {
    if (!args().is_object() || !args().contains("participants") || !args()["participants"].is_array())
      throw agentd::Error(agentd::ErrorCode::bad_args,
                          "GroupAgent needs args {\"participants\": [agent references]}");
    for (const auto& r : args()["participants"])
      if (!agentd::AgentRef::is_ref(r))
        throw agentd::Error(agentd::ErrorCode::bad_args,
                            "participants must hold AgentRef::to_value() values");
  }

  agentd::Task<agentd::Value> call_async(const std::string& method, const agentd::Value& a) override {
    // Connected on the loop thread (here), where connect_agent trusts a reference instead of
    // looking the agent up with a round trip per participant.
    connect();
    if (method == "connect") co_return agentd::Value(refs_.size());
    if (method == "guess") {
      agentd::Value result = co_await guess(int_arg(a, "round", 0, 0));
      co_return result;
    }
    if (method == "closest") co_return closest(a);
    if (method == "members") co_return members();
    co_return co_await AsyncAgent::call_async(method, a);
  }

  agentd::Task<agentd::Msg> reply_async(const agentd::Msg& x) override {
    // A reply plays the first phase: the input is the round number.
    const std::int64_t round = x.content.is_number_integer() ? x.content.get<std::int64_t>() : 0;
    connect();
    agentd::Value result = co_await guess(round);
    co_return agentd::Msg(name(), result);
  }

 private:
  void connect() {
    if (connected_) return;
    const auto& list = args()["participants"];
    refs_.reserve(list.size());
    for (const auto& r : list) refs_.push_back(agentd::connect_agent(*this, r));
    guesses_.assign(refs_.size(), -1);
    connected_ = true;
  }

  agentd::Task<agentd::Value> guess(std::int64_t round) {
    const agentd::Msg ask(name(), agentd::Value(round), "user");
    // Every reply is issued before the first is awaited: the participants wait their latency
    // at the same time, and the calls leave in a few batched messages.
    std::vector<agentd::Placeholder> pending;
    pending.reserve(refs_.size());
    for (const auto& r : refs_) pending.push_back(r.reply(ask));
    std::int64_t sum = 0;
    for (std::size_t i = 0; i < pending.size(); ++i) {
      agentd::Msg m = co_await pending[i];
      const int g = m.content.get<int>();
      guesses_[i] = static_cast<std::int16_t>(g);
      sum += g;
    }
    co_return sum_count(sum, static_cast<std::int64_t>(pending.size()));
  }

  agentd::Value closest(const agentd::Value& a) const {
    if (!a.is_object() || !a.contains("target") || !a["target"].is_number())
      throw agentd::Error(agentd::ErrorCode::bad_args, "closest needs {\"target\": number}");
    const double target = a["target"].get<double>();
    std::size_t best = refs_.size();
    double best_distance = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < refs_.size(); ++i) {
      if (guesses_[i] < 0) continue;
      const double d = std::abs(guesses_[i] - target);
      if (d < best_distance) {
        best_distance = d;
        best = i;
      }
    }
    if (best == refs_.size()) return agentd::Value(nullptr);  // no guesses yet
    return closest_answer(refs_[best].name(), guesses_[best], best_distance);
  }

  agentd::Value members() const {
    agentd::Value out = agentd::Value::array();
    for (std::size_t i = 0; i < refs_.size(); ++i) out.push_back(member_row(refs_[i], guesses_[i]));
    return out;
  }

  bool connected_ = false;
  std::vector<agentd::AgentRef> refs_;
  std::vector<std::int16_t> guesses_;  // of the last round, in refs_ order (-1: none)
};
AGENTD_REGISTER_AGENT(GroupAgent);
