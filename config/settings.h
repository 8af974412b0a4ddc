// Settings: every setting of `vibevoice serve` once (API.md §14.3): key, type, default, valid range,
// doc. The TOML keys, the VIBEVOICE_* variables and the --flags are all derived from this one table,
// and so are the validation errors ("config error: <key>: <reason> (from <source>)").
// A Settings value is built once on the main thread at start and then only read (any thread).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace vv::config {

enum class SettingType { kBool, kInt, kFloat, kString, kList, kEnum, kPath };

struct SettingDef {
  std::string_view key;            // "section.name"
  SettingType type;
  std::string_view default_value;  // as a flag would spell it; lists comma-separated
  double min = 0, max = 0;         // kInt/kFloat range (inclusive) when min < max
  std::string_view choices;        // kEnum: comma-separated values; kInt: allowed set if non-empty
  std::string_view doc;
  bool secret = false;             // shown as "***" by --print-config
};

// The table, in documentation order.
std::span<const SettingDef> setting_table();
const SettingDef* find_setting(std::string_view key);

// "http.max_body_bytes" → "VIBEVOICE_HTTP_MAX_BODY_BYTES" / "--http-max-body-bytes".
std::string env_name(std::string_view key);
std::string flag_name(std::string_view key);

using Value = std::variant<bool, std::int64_t, double, std::string, std::vector<std::string>>;

class Settings {
 public:
  // Every key at its default (source "default").
  Settings();

  bool b(std::string_view key) const;
  std::int64_t i(std::string_view key) const;
  double f(std::string_view key) const;
  const std::string& s(std::string_view key) const;  // kString, kEnum, kPath
  const std::vector<std::string>& list(std::string_view key) const;
  const std::string& source(std::string_view key) const;

  // Parses `raw` as the key's type, checks its range, and stores it with `source`. Lists from a
  // higher source replace lower ones; `append` adds to a list set from the same source (repeated
  // flags). Returns "" or the reason ("expected an integer, got 'abc'").
  std::string set_raw(std::string_view key, std::string_view raw, const std::string& source, bool append = false);
  // A typed value (from TOML); same checks.
  std::string set_value(std::string_view key, Value v, const std::string& source);

  // Cross-field rules and the checks that touch the file system (model.path, key file).
  // One "config error: …" line per problem.
  std::vector<std::string> validate() const;

  // The effective configuration as TOML; secrets as "***".
  std::string to_toml() const;

 private:
  std::size_t index(std::string_view key) const;
  std::vector<Value> values_;
  std::vector<std::string> sources_;
};

struct LoadOutcome {
  Settings settings;
  std::vector<std::string> errors;    // "config error: …" lines; non-empty → exit 2
  std::vector<std::string> warnings;  // unknown VIBEVOICE_* variables
  bool help = false, version = false, print_config = false, check_config = false;
};

// Builds the settings from (lowest to highest) defaults, the TOML file (--config or
// VIBEVOICE_CONFIG), the environment (`env`: "NAME=value" strings) and the arguments after
// `serve`. Validation included.
LoadOutcome load_settings(const std::vector<std::string>& args, const std::vector<std::string>& env);

// The generated `vibevoice serve --help` text (every flag with its type, default and doc).
std::string settings_help();

}  // namespace vv::config
