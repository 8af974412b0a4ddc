// The `vibevoice` subcommands. Each register_* adds one CLI11 subcommand to the app; when the user
// picks it, its callback runs on the main thread and stores the process exit code in `ctx`.
// Errors are printed to stderr by the command itself, naming the file or field at fault.
#pragma once

#include <CLI/CLI.hpp>

namespace vv::cli {

struct CommandContext {
  int exit_code = 0;
};

void register_inspect(CLI::App& app, CommandContext& ctx);     // inspect_command.cpp
void register_tokenize(CLI::App& app, CommandContext& ctx);    // tokenize_command.cpp
void register_transcribe(CLI::App& app, CommandContext& ctx);  // transcribe_command.cpp
void register_bench(CLI::App& app, CommandContext& ctx);       // bench_command.cpp
void register_serve(CLI::App& app, CommandContext& ctx);       // serve_command.cpp

// "0.1.0 (git abc1234) [cpu avx2 ffmpeg]"
std::string version_string();

}  // namespace vv::cli
