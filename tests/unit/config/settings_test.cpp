#include "config/settings.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace vv::config {
namespace {

namespace fs = std::filesystem;

// A directory that passes the model.path checks (config.json, a .safetensors, tokenizer.json).
std::string fake_model_dir() {
  static const std::string dir = [] {
    const fs::path d = fs::temp_directory_path() / ("vv_settings_test_" + std::to_string(::getpid()));
    fs::create_directories(d);
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"}) std::ofstream(d / f) << "{}";
    return d.string();
  }();
  return dir;
}

bool has_line(const std::vector<std::string>& lines, const std::string& needle) {
  for (const auto& l : lines) {
    if (l.find(needle) != std::string::npos) return true;
  }
  return false;
}

TEST(SettingsNames, EnvAndFlagDerivedFromKey) {
  EXPECT_EQ(env_name("http.max_body_bytes"), "VIBEVOICE_HTTP_MAX_BODY_BYTES");
  EXPECT_EQ(flag_name("http.max_body_bytes"), "--http-max-body-bytes");
}

TEST(SettingsTable, EveryDefaultParsesAndValidates) {
  Settings s;
  for (const auto& d : setting_table()) EXPECT_EQ(s.source(d.key), "default") << d.key;
  EXPECT_EQ(s.i("http.port"), 8000);
  EXPECT_EQ(s.list("model.aliases").size(), 6u);
  EXPECT_TRUE(s.list("auth.api_keys").empty());
  EXPECT_DOUBLE_EQ(s.f("engine.gpu_memory_fraction"), 0.9);
}

TEST(LoadSettings, FlagBeatsEnvBeatsFile) {
  const fs::path toml = fs::temp_directory_path() / "vv_settings_prec.toml";
  std::ofstream(toml) << "[http]\nport = 8001\n";
  const std::string m = fake_model_dir();
  auto a = load_settings({"--config", toml.string(), "--model", m, "--port", "8003"}, {"VIBEVOICE_HTTP_PORT=8002"});
  ASSERT_TRUE(a.errors.empty()) << a.errors[0];
  EXPECT_EQ(a.settings.i("http.port"), 8003);
  auto b = load_settings({"--config", toml.string(), m}, {"VIBEVOICE_HTTP_PORT=8002"});
  ASSERT_TRUE(b.errors.empty()) << b.errors[0];
  EXPECT_EQ(b.settings.i("http.port"), 8002);
  EXPECT_EQ(b.settings.source("http.port"), "env VIBEVOICE_HTTP_PORT");
  auto c = load_settings({"--config=" + toml.string(), m}, {});
  EXPECT_EQ(c.settings.i("http.port"), 8001);
  EXPECT_EQ(c.settings.s("model.path"), m);  // the positional argument
}

TEST(LoadSettings, OutOfRangeFlagNamesKeyAndSource) {
  auto r = load_settings({"--model", fake_model_dir(), "--http-port=70000"}, {});
  ASSERT_FALSE(r.errors.empty());
  EXPECT_TRUE(has_line(r.errors, "config error: http.port:")) << r.errors[0];
  EXPECT_TRUE(has_line(r.errors, "(from flag --http-port)"));
}

TEST(LoadSettings, WrongTypeInEnvNamesVariable) {
  auto r = load_settings({"--model", fake_model_dir()}, {"VIBEVOICE_HTTP_PORT=abc"});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].find("http.port"), std::string::npos);
  EXPECT_NE(r.errors[0].find("VIBEVOICE_HTTP_PORT"), std::string::npos);
}

TEST(LoadSettings, UnknownTomlKeyIsAnErrorWithLine) {
  const fs::path toml = fs::temp_directory_path() / "vv_settings_unknown.toml";
  std::ofstream(toml) << "[http]\nport = 8001\nprot = 1\n";
  auto r = load_settings({"--config", toml.string(), "--model", fake_model_dir()}, {});
  ASSERT_FALSE(r.errors.empty());
  EXPECT_TRUE(has_line(r.errors, "http.prot: unknown key"));
  EXPECT_TRUE(has_line(r.errors, ":3)"));
}

TEST(LoadSettings, TomlSyntaxErrorHasLineAndColumn) {
  const fs::path toml = fs::temp_directory_path() / "vv_settings_syntax.toml";
  std::ofstream(toml) << "[http]\nport = = 1\n";
  auto r = load_settings({"--config", toml.string(), "--model", fake_model_dir()}, {});
  ASSERT_FALSE(r.errors.empty());
  EXPECT_TRUE(has_line(r.errors, "TOML syntax error at line 2:"));
}

TEST(LoadSettings, UnknownFlagIsAnErrorUnknownEnvOnlyWarns) {
  auto r = load_settings({"--model", fake_model_dir(), "--no-such-flag", "1"}, {"VIBEVOICE_NOPE=1"});
  EXPECT_TRUE(has_line(r.errors, "unknown flag --no-such-flag"));
  EXPECT_TRUE(has_line(r.warnings, "VIBEVOICE_NOPE"));
}

TEST(LoadSettings, ListsRepeatOrCommaSplitAndReplaceLowerSources) {
  auto r = load_settings({"--model", fake_model_dir(), "--api-key", "k1", "--auth-api-keys=k2,k3"},
                         {"VIBEVOICE_AUTH_API_KEYS=envkey"});
  ASSERT_TRUE(r.errors.empty());
  EXPECT_EQ(r.settings.list("auth.api_keys"), (std::vector<std::string>{"k1", "k2", "k3"}));
}

TEST(LoadSettings, BareBooleanFlagIsTrue) {
  auto r = load_settings({"--model", fake_model_dir(), "--auth-protect-metrics", "--chat-enabled", "false"}, {});
  ASSERT_TRUE(r.errors.empty()) << r.errors[0];
  EXPECT_TRUE(r.settings.b("auth.protect_metrics"));
  EXPECT_FALSE(r.settings.b("chat.enabled"));
}

TEST(LoadSettings, CrossFieldRules) {
  auto r = load_settings({"--model", fake_model_dir(), "--model-aliases", "vibevoice-asr", "--asr-min-audio-seconds",
                          "5", "--asr-max-audio-seconds", "2", "--engine-kv-page-tokens", "24"},
                         {});
  EXPECT_TRUE(has_line(r.errors, "model.aliases: alias 'vibevoice-asr' equals a served name"));
  EXPECT_TRUE(has_line(r.errors, "asr.min_audio_seconds"));
  EXPECT_TRUE(has_line(r.errors, "engine.kv_page_tokens"));
}

TEST(LoadSettings, MissingModelPathIsAnError) {
  auto r = load_settings({"--model", "/no/such/dir"}, {});
  EXPECT_TRUE(has_line(r.errors, "config error: model.path:"));
  auto none = load_settings({}, {});
  EXPECT_TRUE(has_line(none.errors, "model.path: required"));
}

TEST(SettingsToml, PrintConfigMasksSecretsAndRoundTrips) {
  auto r = load_settings({"--model", fake_model_dir(), "--api-key", "sekrit-key", "--port", "9001"}, {});
  ASSERT_TRUE(r.errors.empty());
  const std::string toml = r.settings.to_toml();
  EXPECT_NE(toml.find("api_keys = [\"***\"]"), std::string::npos);
  EXPECT_EQ(toml.find("sekrit"), std::string::npos);
  // The printed file (secrets aside) loads back to the same values.
  const fs::path out = fs::temp_directory_path() / "vv_settings_roundtrip.toml";
  std::ofstream(out) << toml;
  auto back = load_settings({"--config", out.string()}, {});
  ASSERT_TRUE(back.errors.empty()) << back.errors[0];
  EXPECT_EQ(back.settings.i("http.port"), 9001);
  EXPECT_EQ(back.settings.list("model.aliases"), r.settings.list("model.aliases"));
}

}  // namespace
}  // namespace vv::config
