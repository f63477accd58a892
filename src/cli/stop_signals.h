// StopSignals: SIGTERM and SIGINT for a serving command (fathom serve, fathom router). The
// first signal calls `stop` (the server's graceful drain); a second calls it again, which
// ends the grace period at once (the replies in flight are cancelled), as uvicorn and vLLM
// treat a second Ctrl-C. SIGPIPE is ignored.
//
// One per process, built and destroyed on the command's main thread; `stop` runs on the
// object's watcher thread. signalled() may be called from any thread.
#pragma once

#include <functional>
#include <thread>

namespace fathom::cli {

class StopSignals {
 public:
  // Installs the handlers and starts the watcher. `name` prefixes the second signal's notice.
  StopSignals(std::function<void()> stop, const char* name);
  // Ends the watcher (the server has returned), joins it and puts the default handlers back
  // (a signal during the rest of the shutdown then ends the process).
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Whether a signal has arrived.
  bool signalled() const;

 private:
  std::thread watcher_;
};

}  // namespace fathom::cli
