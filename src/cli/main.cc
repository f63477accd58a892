// fathom: the command-line entry point. Subcommands live in *_commands.cc.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "kernels/cpu_features.h"

namespace fathom::cli {
void add_grammar_bench_command(CLI::App& app, Runner* run);  // grammar_commands.cc
}

int main(int argc, char** argv) {
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
