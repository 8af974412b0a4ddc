// Loading tokenizer.json (HF tokenizers format) into Tokenizer::Impl.
#include <algorithm>
#include <array>
#include <fstream>
#include <sstream>

#include <simdjson.h>

#include "engine/text/byte_level.h"
#include "engine/text/tokenizer_impl.h"

namespace vv {
namespace {

constexpr std::int64_t kMaxId = 1 << 24;  // ids must stay below this (guards allocations)
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

using simdjson::dom::element;

Status load_vocab(Tokenizer::Impl& t, element vocab, const std::string& origin) {
  simdjson::dom::object obj;
  if (vocab.get_object().get(obj)) return invalid_argument(origin + ": model.vocab is not an object");
  t.vocab.reserve(obj.size());
  for (auto field : obj) {
    std::int64_t id = 0;
    if (field.value.get_int64().get(id) || id < 0 || id >= kMaxId) {
      return invalid_argument(origin + ": model.vocab[\"" + std::string(field.key) +
                              "\"] is not an id in [0, 2^24)");
    }
    t.vocab.insert_or_assign(std::string(field.key), static_cast<TokenId>(id));
  }
  return Status::ok();
}

// Splits one merges entry ("a b" or ["a", "b"]) into its two spellings.
Status merge_parts(element m, std::size_t index, const std::string& origin, std::string_view& a,
                   std::string_view& b) {
  std::string_view s;
  if (!m.get_string().get(s)) {
    std::size_t sp = s.find(' ');
    if (sp == std::string_view::npos || s.find(' ', sp + 1) != std::string_view::npos) {
      return invalid_argument(origin + ": model.merges[" + std::to_string(index) +
                              "] is not two tokens separated by one space");
    }
    a = s.substr(0, sp);
    b = s.substr(sp + 1);
    return Status::ok();
  }
  simdjson::dom::array arr;
  if (m.get_array().get(arr) || arr.size() != 2 || arr.at(0).get_string().get(a) ||
      arr.at(1).get_string().get(b)) {
    return invalid_argument(origin + ": model.merges[" + std::to_string(index) +
                            "] is neither \"a b\" nor [\"a\", \"b\"]");
  }
  return Status::ok();
}

Status load_merges(Tokenizer::Impl& t, element merges, const std::string& origin) {
  simdjson::dom::array arr;
  if (merges.get_array().get(arr)) return invalid_argument(origin + ": model.merges is not an array");
  std::string joined;
  std::uint32_t rank = 0;
  for (element m : arr) {
    std::string_view a, b;
    VV_RETURN_IF_ERROR(merge_parts(m, rank, origin, a, b));
    joined.assign(a);
    joined.append(b);
    auto ia = t.vocab.find(a);
    auto ib = t.vocab.find(b);
    auto im = t.vocab.find(joined);
    if (ia == t.vocab.end() || ib == t.vocab.end() || im == t.vocab.end()) {
      return invalid_argument(origin + ": model.merges[" + std::to_string(rank) + "] (\"" +
                              std::string(a) + "\", \"" + std::string(b) +
                              "\") uses a token missing from model.vocab");
    }
    t.bpe.add_merge(ia->second, ib->second, im->second, rank);
    ++rank;
  }
  return Status::ok();
}

Status load_added(Tokenizer::Impl& t, element doc, const std::string& origin) {
  element added;
  if (doc["added_tokens"].get(added)) return Status::ok();
  if (added.is_null()) return Status::ok();
  simdjson::dom::array arr;
  if (added.get_array().get(arr)) return invalid_argument(origin + ": added_tokens is not an array");
  std::size_t index = 0;
  for (element a : arr) {
    std::int64_t id = 0;
    std::string_view content;
    bool special = false;
    std::string where = origin + ": added_tokens[" + std::to_string(index++) + "]";
    if (a["id"].get_int64().get(id) || id < 0 || id >= kMaxId) {
      return invalid_argument(where + ".id is not an id in [0, 2^24)");
    }
    if (a["content"].get_string().get(content) || content.empty()) {
      return invalid_argument(where + ".content is not a non-empty string");
    }
    element sp;
    if (!a["special"].get(sp) && sp.get_bool().get(special)) {
      return invalid_argument(where + ".special is not a boolean");
    }
    t.added.push_back({static_cast<TokenId>(id), std::string(content), special});
  }
  return Status::ok();
}

Status check_pipeline(element doc, const std::string& origin) {
  element model;
  if (doc["model"].get(model)) return invalid_argument(origin + ": no \"model\" object");
  std::string_view type;
  if (!model["type"].get_string().get(type) && type != "BPE") {
    return unsupported(origin + ": model.type \"" + std::string(type) + "\" (only BPE)");
  }
  bool byte_fallback = false;
  if (!model["byte_fallback"].get_bool().get(byte_fallback) && byte_fallback) {
    return unsupported(origin + ": model.byte_fallback true (byte-level BPE without fallback only)");
  }
  element norm;
  if (!doc["normalizer"].get(norm) && !norm.is_null()) {
    std::string_view nt;
    if (norm["type"].get_string().get(nt) || nt != "NFC") {
      return unsupported(origin + ": normalizer other than NFC");
    }
  }
  element pre;
  if (!doc["pre_tokenizer"].get(pre) && !pre.is_null()) {
    simdjson::dom::array seq;
    if (!pre["pretokenizers"].get_array().get(seq)) {
      for (element p : seq) {
        std::string_view regex;
        if (!p["pattern"]["Regex"].get_string().get(regex) && regex != kQwen2Regex) {
          return unsupported(origin + ": pre_tokenizer regex is not Qwen2's");
        }
      }
    }
  }
  return Status::ok();
}

Status build(Tokenizer::Impl& t, std::string_view json, const std::string& origin) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  element doc;
  if (auto err = parser.parse(padded).get(doc)) {
    return invalid_argument(origin + ": not valid JSON (" + simdjson::error_message(err) + ")");
  }
  if (!doc.is_object()) return invalid_argument(origin + ": top level is not an object");
  VV_RETURN_IF_ERROR(check_pipeline(doc, origin));
  element vocab, merges;
  if (doc["model"]["vocab"].get(vocab)) return invalid_argument(origin + ": no model.vocab");
  VV_RETURN_IF_ERROR(load_vocab(t, vocab, origin));
  if (doc["model"]["merges"].get(merges)) return invalid_argument(origin + ": no model.merges");
  VV_RETURN_IF_ERROR(load_merges(t, merges, origin));
  VV_RETURN_IF_ERROR(load_added(t, doc, origin));

  TokenId count = 0;
  for (const auto& [s, id] : t.vocab) count = std::max(count, id + 1);
  for (const auto& a : t.added) count = std::max(count, a.id + 1);
  std::size_t entries = t.vocab.size() + t.added.size();
  if (static_cast<std::size_t>(count) > 2 * entries + 1024) {
    return invalid_argument(origin + ": ids are sparse: highest id " + std::to_string(count - 1) +
                            " for " + std::to_string(entries) + " tokens");
  }
  t.bytes_of.assign(static_cast<std::size_t>(count), {});
  t.known.assign(static_cast<std::size_t>(count), 0);
  t.special.assign(static_cast<std::size_t>(count), 0);
  for (const auto& [s, id] : t.vocab) {
    t.bytes_of[static_cast<std::size_t>(id)] = byte_level::to_bytes(s);
    t.known[static_cast<std::size_t>(id)] = 1;
  }
  for (std::size_t i = 0; i < t.added.size(); ++i) {
    const AddedToken& a = t.added[i];
    auto id = static_cast<std::size_t>(a.id);
    t.bytes_of[id] = a.content;
    t.known[id] = 1;
    t.special[id] = a.special ? 1 : 0;
    t.added_by_content[a.content] = a.id;
    auto first = static_cast<std::uint8_t>(a.content[0]);
    t.added_by_first_byte[first].push_back(i);
    t.any_added_first_byte[first] = true;
  }
  for (auto& group : t.added_by_first_byte) {
    std::stable_sort(group.begin(), group.end(), [&](std::size_t x, std::size_t y) {
      return t.added[x].content.size() > t.added[y].content.size();
    });
  }
  std::array<TokenId, 256> byte_ids{};
  for (int b = 0; b < 256; ++b) {
    auto it = t.vocab.find(byte_level::to_spelling(std::string(1, static_cast<char>(b))));
    byte_ids[static_cast<std::size_t>(b)] = it == t.vocab.end() ? -1 : it->second;
  }
  t.bpe.set_byte_ids(byte_ids);
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::load_json(std::string_view json, const std::string& origin) {
  auto impl = std::make_unique<Impl>();
  VV_RETURN_IF_ERROR(build(*impl, json, origin));
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::load_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path + ": cannot open tokenizer file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in.good() && !in.eof()) return invalid_argument(path + ": read error");
  return load_json(ss.str(), path);
}

}  // namespace vv
