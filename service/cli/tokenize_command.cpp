// `vibevoice tokenize`: text ↔ token ids with the model's tokenizer, one JSON value per line.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <simdjson.h>

#include "engine/text/tokenizer.h"
#include "service/cli/commands.h"

namespace vv::cli {
namespace {

struct TokenizeOptions {
  std::string tokenizer_path;
  bool decode = false;
  bool no_special = false;
};

void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

// One input line → one output line; an error names the line and what was wrong with it.
Status process_line(const Tokenizer& tok, const TokenizeOptions& opt, simdjson::dom::parser& parser,
                    const std::string& line, std::size_t line_no, std::string& out) {
  std::string where = "stdin line " + std::to_string(line_no);
  simdjson::dom::element v;
  if (auto err = parser.parse(line).get(v)) {
    return invalid_argument(where + ": not JSON (" + simdjson::error_message(err) + ")");
  }
  out.clear();
  if (!opt.decode) {
    std::string_view text;
    if (v.get_string().get(text)) return invalid_argument(where + ": expected a JSON string");
    auto ids = tok.encode(text, !opt.no_special);
    if (!ids.is_ok()) return invalid_argument(where + ": " + ids.status().message());
    out.push_back('[');
    for (std::size_t i = 0; i < ids->size(); ++i) {
      if (i) out.push_back(',');
      out += std::to_string((*ids)[i]);
    }
    out.push_back(']');
    return Status::ok();
  }
  simdjson::dom::array arr;
  if (v.get_array().get(arr)) return invalid_argument(where + ": expected a JSON array of ids");
  std::vector<TokenId> ids;
  std::size_t k = 0;
  for (auto e : arr) {
    std::int64_t id = 0;
    if (e.get_int64().get(id) || id < 0 || id >= tok.id_count() || !tok.is_known(static_cast<TokenId>(id))) {
      return invalid_argument(where + ": element " + std::to_string(k) + " is not a known token id");
    }
    ids.push_back(static_cast<TokenId>(id));
    ++k;
  }
  append_json_string(out, tok.decode(ids, opt.no_special));
  return Status::ok();
}

int run_tokenize(const TokenizeOptions& opt) {
  auto tok = Tokenizer::load_file(opt.tokenizer_path);
  if (!tok.is_ok()) {
    std::cerr << "vibevoice tokenize: " << tok.status().to_string() << "\n";
    return 1;
  }
  simdjson::dom::parser parser;
  std::string line, out;
  std::size_t line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    Status st = process_line(**tok, opt, parser, line, line_no, out);
    if (!st.is_ok()) {
      std::cerr << "vibevoice tokenize: " << st.message() << "\n";
      return 1;
    }
    out.push_back('\n');
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

void register_tokenize(CLI::App& app, CommandContext& ctx) {
  auto opt = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize",
      "Text to token ids (or back) with the model's Qwen2.5 tokenizer.\n"
      "Reads standard input one JSON value per line and writes one per line:\n"
      "  encode (default): a JSON string in, a JSON array of ids out\n"
      "    echo '\"Hello world\"' | vibevoice tokenize --tokenizer tokenizer.json   → [9707,1879]\n"
      "  --decode: a JSON array of ids in, a JSON string out\n"
      "    echo '[9707,1879]' | vibevoice tokenize --tokenizer tokenizer.json --decode → \"Hello world\"\n"
      "Empty lines are skipped. The first bad line stops the command with exit code 1.");
  cmd->add_option("--tokenizer", opt->tokenizer_path, "Path of tokenizer.json (HF tokenizers format)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_flag("--decode", opt->decode, "Ids to text instead of text to ids");
  cmd->add_flag("--no-special", opt->no_special,
                "Encode: treat added tokens such as <|im_end|> as plain text (as for user text). "
                "Decode: drop special tokens (ids 151643-151656) from the text");
  cmd->callback([opt, &ctx] { ctx.exit_code = run_tokenize(*opt); });
}

}  // namespace vv::cli
