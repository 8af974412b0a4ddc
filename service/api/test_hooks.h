// Test hooks: the spec's test-only mechanisms (API.md §15: load delay, engine pause/stall, fault
// injection, scripted decoder) as environment variables read once at `vibevoice serve` start.
// They are for the conformance tests (tests/integration/serve) and are inert when unset. Read by
// serve_command.cpp (main thread) before anything starts; the values are then immutable.
//
// HOW TO START A SERVER FOR TESTS
//   vibevoice serve --model tests/data/golden/model-hf --tokenizer tests/data/tokenizer/tokenizer.json
//                   --host 127.0.0.1 --port 0 [--api-key KEY ...] [any --section-key value]
//   * --port 0 binds an ephemeral port. Once bound, the server writes ONE plain line to stderr:
//         listening on 127.0.0.1:<port>
//     (always plain text, before/independent of log.format); parse the port from it. The listener
//     is up before the weights load: poll GET /ready until 200.
//   * --tokenizer (key model.tokenizer, extension) names tokenizer.json when model.path has none
//     (the tiny golden model keeps it in tests/data/tokenizer/).
//   * Logs (spdlog, log.format json by default) go to stderr, one JSON object per line; access log
//     lines have "msg":"access" and the request id.
//   * SIGTERM/SIGINT drain (§13.4); exit code 0.
//
// ENGINE SELECTION
//   VIBEVOICE_TEST_FAKE_ENGINE=1     serve with the scripted fake engine (service/api/fake_engine.h)
//                                    instead of the model runner: no weights are run, only the
//                                    tokenizer is loaded. Generation is the script below (or, with
//                                    no script, a fixed two-segment array sized to the audio).
//                                    Token usage, segments, finish reasons behave as with the model.
//
// HOOKS (all engines)
//   VIBEVOICE_TEST_LOAD_DELAY_MS=N   loading takes at least N ms; /ready reports "loading" with a
//                                    progress rising from 0 to 1 over that time (C59, C75).
//   VIBEVOICE_TEST_PAUSE_FILE=PATH   while PATH exists the engine takes no step (queued and running
//                                    requests wait; no tokens). Create the file to pause, delete it
//                                    to resume (C55 keep-alives, C79 stall, C99 drain).
//   VIBEVOICE_TEST_FAULT_AFTER_TOKENS=N  every request fails with engine_error after N generated
//                                    tokens (C57).
//   VIBEVOICE_TEST_SCRIPT=FILE       scripted decoder: the file's bytes are the model's answer (what
//                                    follows "<|im_start|>assistant\n", e.g. the MODEL.md §9.1 JSON
//                                    array); it is tokenized with the model's tokenizer and emitted
//                                    one token per engine step, each with logprob -0.01 (an
//                                    <|im_end|> is appended, so finish_reason is "stop"; with
//                                    asr.max_new_tokens below the token count it is "length").
//                                    Applies to transcriptions and translations; chat gets the
//                                    script too when VIBEVOICE_TEST_SCRIPT_CHAT=1.
//   VIBEVOICE_TEST_TOKEN_DELAY_MS=N  each engine step (one token per running request) takes at least
//                                    N ms, to make requests long (C56, C96, C98, C99, C100).
#pragma once

#include <cstdint>
#include <string>

namespace vv::api {

struct TestHooks {
  bool fake_engine = false;
  std::int64_t load_delay_ms = 0;
  std::string pause_file;
  std::int64_t fault_after_tokens = -1;  // < 0: off
  std::string script_file;
  bool script_chat = false;
  std::int64_t token_delay_ms = 0;

  // Reads the VIBEVOICE_TEST_* variables above (unset or unparsable numbers → off).
  static TestHooks from_environment();
  bool paused() const;  // pause_file is set and exists
};

}  // namespace vv::api
