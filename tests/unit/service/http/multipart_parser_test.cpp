// GCC 12 reports a false -Wrestrict inside std::string concatenation at -O3 (GCC bug 105329).
#pragma GCC diagnostic ignored "-Wrestrict"
// The same GCC 12 inlining also reports a false -Wstringop-overflow in "f" + std::to_string(i) once
// this file holds more tests.
#pragma GCC diagnostic ignored "-Wstringop-overflow"

#include "service/http/multipart_parser.h"

#include <gtest/gtest.h>

#include <string>

namespace vv::http {
namespace {

std::string form(const std::string& b, const std::vector<std::pair<std::string, std::string>>& fields,
                 const std::string& file = "", bool close = true) {
  std::string s;
  for (const auto& [k, v] : fields) {
    s += "--" + b + "\r\nContent-Disposition: form-data; name=\"" + k + "\"\r\n\r\n" + v + "\r\n";
  }
  if (!file.empty()) {
    s += "--" + b + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\n" +
         file + "\r\n";
  }
  if (close) s += "--" + b + "--\r\n";
  return s;
}

TEST(MultipartBoundary, ParsesTypeAndBoundary) {
  EXPECT_EQ(*multipart_boundary("multipart/form-data; boundary=abc"), "abc");
  EXPECT_EQ(*multipart_boundary("Multipart/Form-Data; boundary=\"a b;c\""), "a b;c");
  EXPECT_EQ(*multipart_boundary("multipart/form-data"), "");                     // missing → invalid
  EXPECT_EQ(*multipart_boundary("multipart/form-data; boundary=" + std::string(71, 'x')), "");
  EXPECT_FALSE(multipart_boundary("application/json").has_value());
  EXPECT_FALSE(multipart_boundary("").has_value());
}

TEST(MultipartParser, WholeBodyAtOnce) {
  const std::string body = form("XyZ", {{"model", "whisper-1"}, {"language", "en"}}, std::string("RIFF\0\r\n--Xy", 12));
  MultipartParser p("XyZ", {});
  ASSERT_TRUE(p.feed(body));
  ASSERT_TRUE(p.finish());
  ASSERT_EQ(p.parts().size(), 3u);
  EXPECT_EQ(p.parts()[0].name, "model");
  EXPECT_EQ(p.parts()[0].data, "whisper-1");
  EXPECT_EQ(p.parts()[2].name, "file");
  EXPECT_EQ(*p.parts()[2].filename, "a.wav");
  EXPECT_EQ(p.parts()[2].content_type, "audio/wav");
  EXPECT_EQ(p.parts()[2].data, std::string("RIFF\0\r\n--Xy", 12));  // a near-delimiter inside data
}

TEST(MultipartParser, ByteByByteEqualsWhole) {
  const std::string body = "preamble\r\n" + form("b0undary", {{"a", "1"}, {"keywords[]", "x"}}, std::string(5000, 'Q'));
  MultipartParser whole("b0undary", {}), bytes("b0undary", {});
  ASSERT_TRUE(whole.feed(body));
  for (char c : body) ASSERT_TRUE(bytes.feed(std::string_view(&c, 1)));
  ASSERT_TRUE(whole.finish());
  ASSERT_TRUE(bytes.finish());
  ASSERT_EQ(whole.parts().size(), bytes.parts().size());
  for (std::size_t i = 0; i < whole.parts().size(); ++i) {
    EXPECT_EQ(whole.parts()[i].name, bytes.parts()[i].name);
    EXPECT_EQ(whole.parts()[i].data, bytes.parts()[i].data);
  }
  EXPECT_EQ(bytes.parts().back().data.size(), 5000u);
}

// The body is scanned in place and only a possible delimiter start is carried between feeds:
// every split of a body whose data is full of delimiter prefixes (and of CRLFs and dashes right
// before the real delimiters) gives the parts of the whole body.
TEST(MultipartParser, AnySplitEqualsWhole) {
  std::string data;
  const std::string_view prefix = "\r\n--bndr";  // every prefix of the delimiter "\r\n--bndry"
  for (std::size_t i = 0; i < 40; ++i) {
    data.append(prefix.substr(0, 1 + i % prefix.size()));
    data += 'z';
  }
  data += "\r\n-";
  const std::string body = "pre\r\n" + form("bndry", {{"model", "m\r\n--bndr"}, {"a", ""}}, data);
  MultipartParser whole("bndry", {});
  ASSERT_TRUE(whole.feed(body));
  ASSERT_TRUE(whole.finish());
  ASSERT_EQ(whole.parts().size(), 3u);
  EXPECT_EQ(whole.parts()[0].data, "m\r\n--bndr");
  EXPECT_EQ(whole.parts()[2].data, data);
  for (std::size_t first = 1; first < body.size(); first += 3) {
    for (std::size_t second : {std::size_t{1}, std::size_t{7}, std::size_t{64}}) {
      MultipartParser p("bndry", {});
      std::size_t at = 0;
      bool odd = false;
      while (at < body.size()) {
        const std::size_t n = std::min(odd ? second : first, body.size() - at);
        ASSERT_TRUE(p.feed(std::string_view(body).substr(at, n))) << first << "/" << second;
        at += n;
        odd = !odd;
      }
      ASSERT_TRUE(p.finish()) << first << "/" << second;
      ASSERT_EQ(p.parts().size(), 3u);
      for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(p.parts()[i].name, whole.parts()[i].name);
        ASSERT_EQ(p.parts()[i].data, whole.parts()[i].data)
            << "split " << first << "/" << second << " part " << i;
      }
    }
  }
}

TEST(MultipartParser, MissingClosingBoundaryIsInvalid) {
  MultipartParser p("b", {});
  ASSERT_TRUE(p.feed(form("b", {{"model", "x"}}, "", /*close=*/false)));
  EXPECT_FALSE(p.finish());
  EXPECT_EQ(p.error()->code, "invalid_multipart");
}

TEST(MultipartParser, PartWithoutNameIsInvalid) {
  MultipartParser p("b", {});
  EXPECT_FALSE(p.feed("--b\r\nContent-Disposition: form-data\r\n\r\nx\r\n--b--\r\n"));
  EXPECT_EQ(p.error()->code, "invalid_multipart");
}

TEST(MultipartParser, TooManyPartsIsRefusedAsTheyArrive) {
  MultipartLimits l;
  l.max_parts = 4;
  MultipartParser p("b", l);
  std::vector<std::pair<std::string, std::string>> f;
  for (int i = 0; i < 5; ++i) f.push_back({"f" + std::to_string(i), "v"});
  EXPECT_FALSE(p.feed(form("b", f)));
  EXPECT_EQ(p.error()->code, "invalid_multipart");
}

TEST(MultipartParser, OversizedFieldNamesTheField) {
  MultipartLimits l;
  l.max_field_bytes = 1024;
  MultipartParser p("b", l);
  EXPECT_FALSE(p.feed(form("b", {{"prompt", std::string(2000, 'p')}})));
  EXPECT_EQ(p.error()->code, "invalid_value");
  EXPECT_EQ(*p.error()->param, "prompt");
}

TEST(MultipartParser, OversizedPartHeaderIsInvalid) {
  MultipartParser p("b", {});
  EXPECT_FALSE(p.feed("--b\r\nContent-Disposition: form-data; name=\"x\"\r\nX-Pad: " + std::string(9000, 'a')));
  EXPECT_EQ(p.error()->code, "invalid_multipart");
}

TEST(MultipartParser, ExtraFilePartsAreCountedButNotKept) {
  MultipartParser p("b", {});
  std::string body = "--b\r\nContent-Disposition: form-data; name=\"attachment\"; filename=\"x.bin\"\r\n\r\n" +
                     std::string(100000, 'z') + "\r\n" + form("b", {{"model", "m"}});
  ASSERT_TRUE(p.feed(body));
  ASSERT_TRUE(p.finish());
  ASSERT_EQ(p.parts().size(), 1u);
  EXPECT_EQ(p.parts()[0].name, "model");
  EXPECT_EQ(p.part_count(), 2u);
}

TEST(MultipartParser, FileWithoutFilenameOrTypeIsTheAudio) {
  MultipartParser p("b", {});
  ASSERT_TRUE(p.feed("--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nDATA\r\n--b--"));
  ASSERT_TRUE(p.finish());
  ASSERT_EQ(p.parts().size(), 1u);
  EXPECT_EQ(p.parts()[0].data, "DATA");
  EXPECT_FALSE(p.parts()[0].filename.has_value());
}

TEST(MultipartParser, Rfc5987FilenameIsDecoded) {
  MultipartParser p("b", {});
  ASSERT_TRUE(p.feed("--b\r\nContent-Disposition: form-data; name=\"file\"; filename*=UTF-8''%C3%A9t%C3%A9.wav\r\n\r\nD\r\n--b--"));
  ASSERT_TRUE(p.finish());
  EXPECT_EQ(*p.parts()[0].filename, "\xC3\xA9t\xC3\xA9.wav");
}

}  // namespace
}  // namespace vv::http
