// The `fathom` subcommands. Each registers itself on the CLI11 app and returns the process
// exit code when run: 0 success, 1 runtime failure, 2 bad input or usage.
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <functional>
#include <string>

namespace fathom::cli {

using Runner = std::function<int()>;

// `text` as a whole number (std::stod's syntax), NaN for anything else.
inline double parse_number(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    used = 0;
  }
  return used == 0 || used != text.size() ? std::nan("") : v;
}

// A check for an option given in seconds: a number, > 0 (`positive`) or >= 0, and at most
// 1e9 (about 31 years: a larger timeout overflowed the clocks; NaN passed CLI11's own
// number checks).
inline CLI::Validator seconds_check(bool positive) {
  return CLI::Validator(
      [positive](std::string& text) -> std::string {
        const double v = parse_number(text);
        if (v != v) return "not a number of seconds: " + text;
        if (positive ? !(v > 0) : !(v >= 0))
          return std::string("seconds must be ") + (positive ? "> 0" : ">= 0") + ": " + text;
        if (v > 1e9) return "at most 1e9 seconds: " + text;
        return "";
      },
      positive ? "SECONDS > 0" : "SECONDS >= 0");
}

// Registers tokenize, detokenize; sets *run when one of them is chosen.
void add_tokenizer_commands(CLI::App& app, Runner* run);
// Registers `render`.
void add_prompt_commands(CLI::App& app, Runner* run);
// Registers `inspect`.
void add_model_commands(CLI::App& app, Runner* run);
// Registers `mkmodel`, `forward` and `generate`.
void add_run_commands(CLI::App& app, Runner* run);
// Registers `serve`.
void add_serve_command(CLI::App& app, Runner* run);
// router_command.cc: `fathom router`.
void add_router_command(CLI::App& app, Runner* run);
// Registers `bench` and its subcommands.
void add_bench_commands(CLI::App& app, Runner* run);
// router_bench_command.cc: `bench router` on the `bench` subcommand.
void add_router_bench_command(CLI::App* bench, Runner* run);
// Registers `bench kvhash` and `bench kvstore` on the `bench` subcommand.
void add_kv_bench_commands(CLI::App* bench, Runner* run);

}  // namespace fathom::cli
