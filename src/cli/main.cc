// fathom: the command-line entry point. Subcommands live in *_commands.cc.
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "kernels/cpu_features.h"

namespace fathom::cli {
void add_grammar_bench_command(CLI::App& app, Runner* run);  // grammar_commands.cc
}

namespace {
// glibc's defaults map each allocation over ~1 MB afresh and give the free top of the heap back
// to the kernel, so every KV-store read (a 0.8 MB block object, 16 to a batch; an 18 MB window
// object on V4.1-Flash) wrote into newly faulted pages: on a VM that made a read of a block
// from Redis or a warm disk cost more in page faults than in copying (fathom bench kvstore).
// Kept mapped, the freed buffers are reused by the next read. At most 128 MB of free heap
// top is kept per arena.
void keep_freed_buffers_mapped() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's ceiling for the dynamic threshold
  mallopt(M_TRIM_THRESHOLD, 128 << 20);
}
}  // namespace

int main(int argc, char** argv) {
  keep_freed_buffers_mapped();
  CLI::App app{"Fathom: an inference stack for DeepSeek V4-family models"};
  app.set_version_flag("--version", "fathom 0.1.0");
  app.require_subcommand(1);
  fathom::cli::Runner run;
  fathom::cli::add_tokenizer_commands(app, &run);
  fathom::cli::add_prompt_commands(app, &run);
  fathom::cli::add_model_commands(app, &run);
  fathom::cli::add_run_commands(app, &run);
  fathom::cli::add_serve_command(app, &run);
  fathom::cli::add_router_command(app, &run);
  fathom::cli::add_bench_commands(app, &run);
  fathom::cli::add_grammar_bench_command(app, &run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (!run) return 2;
  // A FATHOM_CPU this machine cannot honour is refused before any work starts.
  if (auto path = fathom::kernels::select_cpu_path(); !path.is_ok()) {
    std::fprintf(stderr, "fathom: %s\n", path.status().message().c_str());
    return 2;
  }
  return run();
}
