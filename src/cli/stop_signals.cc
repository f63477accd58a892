#include "cli/stop_signals.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>

namespace fathom::cli {
namespace {

std::atomic<int> g_signals{0};  // signals received
static_assert(std::atomic<int>::is_always_lock_free,
              "the handler may only touch lock-free atomics");
std::atomic<bool> g_done{false};
void on_signal(int) { g_signals.fetch_add(1); }

void sleep_a_little() { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }

}  // namespace

StopSignals::StopSignals(std::function<void()> stop, const char* name) {
  g_done.store(false);
  ::signal(SIGTERM, on_signal);
  ::signal(SIGINT, on_signal);
  ::signal(SIGPIPE, SIG_IGN);
  watcher_ = std::thread([stop = std::move(stop), name] {
    while (g_signals.load() == 0 && !g_done.load()) sleep_a_little();
    if (g_done.load()) return;
    stop();
    while (g_signals.load() < 2 && !g_done.load()) sleep_a_little();
    if (g_done.load()) return;
    std::fprintf(stderr, "%s: second signal: cancelling the requests in flight\n", name);
    stop();
  });
}

StopSignals::~StopSignals() {
  g_done.store(true);
  watcher_.join();
  // Whatever follows (the engine's shutdown) can be interrupted again.
  ::signal(SIGTERM, SIG_DFL);
  ::signal(SIGINT, SIG_DFL);
}

bool StopSignals::signalled() const { return g_signals.load() > 0; }

}  // namespace fathom::cli
