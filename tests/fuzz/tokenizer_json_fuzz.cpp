// libFuzzer: arbitrary bytes as tokenizer.json content. Loading must never crash (only return an
// error); a tokenizer that loads is then used to encode and decode a fixed mixed string, and to
// decode ids taken from the input, which must not crash either.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/text/incremental_decoder.h"
#include "engine/text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view json(reinterpret_cast<const char*>(data), size);
  auto tok = vv::Tokenizer::load_json(json, "fuzz.json");
  if (!tok.is_ok()) return 0;
  const vv::Tokenizer& t = **tok;
  static const std::string kText =
      "Hello world, it's 2024! <|im_end|> 中文 e\xCC\x81 \xF0\x9F\x98\x80\n\n  x<|x|>ab";
  for (bool special : {true, false}) {
    auto ids = t.encode(kText, special);
    if (!ids.is_ok()) __builtin_trap();  // valid UTF-8 must always encode
    (void)t.decode(*ids);
  }
  std::vector<vv::TokenId> ids;
  for (std::size_t i = 0; i + 1 < size && ids.size() < 64; i += 2) {
    ids.push_back(static_cast<vv::TokenId>(data[i] | (data[i + 1] << 8)) % (t.id_count() + 2) - 1);
  }
  (void)t.decode(ids, true);
  vv::IncrementalDecoder dec(t);
  for (vv::TokenId id : ids) (void)dec.push(id);
  (void)dec.flush();
  return 0;
}
