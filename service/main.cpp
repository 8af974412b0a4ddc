// vibevoice: one binary for transcription, serving, benchmarks and model inspection.
#include <cstdio>

#include <CLI/CLI.hpp>

#include "service/cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "vibevoice: VibeVoice-ASR inference (speaker-attributed, timestamped transcription).\n"
      "Run `vibevoice <command> --help` for the options of a command."};
  app.set_version_flag("-V,--version", vv::cli::version_string());
  app.require_subcommand(1);
  vv::cli::CommandContext ctx;
  // Each subcommand registers itself here (service/cli/*_command.cpp).
  vv::cli::register_inspect(app, ctx);
  vv::cli::register_tokenize(app, ctx);
  vv::cli::register_transcribe(app, ctx);
  vv::cli::register_bench(app, ctx);
  vv::cli::register_serve(app, ctx);
  CLI11_PARSE(app, argc, argv);
  return ctx.exit_code;
}
