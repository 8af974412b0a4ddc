// The WAV reader on files written here in every layout it accepts (each sample checked against
// libsndfile's conversion rule), and on broken files, which must fail naming the chunk and offset.
#include "engine/audio/wav_reader.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/audio/audio_decoder.h"
#include "engine/audio/ffmpeg_decoder.h"
#include "tests/unit/engine/audio/audio_test_files.h"

namespace vv::audio {
namespace {

using audio_test::make_wav;
using audio_test::pcm_bytes;
using audio_test::WavSpec;

// A deterministic test signal in [-0.9, 0.9].
std::vector<double> signal(std::size_t n, double phase = 0.0) {
  std::vector<double> s(n);
  for (std::size_t i = 0; i < n; ++i) s[i] = 0.9 * std::sin(0.037 * static_cast<double>(i) + phase) * std::cos(0.0011 * i);
  return s;
}

std::vector<double> interleave(const std::vector<std::vector<double>>& channels) {
  std::vector<double> out;
  for (std::size_t i = 0; i < channels[0].size(); ++i)
    for (const auto& c : channels) out.push_back(c[i]);
  return out;
}

// What libsndfile gives for a sample stored at `bits` (quantised as pcm_bytes does).
float expected_pcm(double s, int bits) {
  if (bits == 8) return static_cast<float>(std::lround(s * 128.0)) / 128.0f;
  const double full = std::ldexp(1.0, bits - 1);
  return static_cast<float>(static_cast<float>(std::llround(s * full)) * static_cast<float>(1.0 / full));
}

TEST(WavReader, PcmOf8_16_24_32BitsDecodesAsLibsndfileScalesIt) {
  const std::vector<double> s = signal(1000);
  for (int bits : {8, 16, 24, 32}) {
    SCOPED_TRACE("bits " + std::to_string(bits));
    WavSpec spec;
    spec.bits = static_cast<std::uint16_t>(bits);
    spec.sample_rate = 16000;
    Result<DecodedAudio> a = read_wav(make_wav(spec, pcm_bytes(s, bits, false)));
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    EXPECT_EQ(a->sample_rate, 16000);
    EXPECT_EQ(a->channels, 1);
    ASSERT_EQ(a->samples.size(), s.size());
    for (std::size_t i = 0; i < s.size(); ++i) ASSERT_EQ(a->samples[i], expected_pcm(s[i], bits)) << "sample " << i;
  }
}

TEST(WavReader, Pcm16IsValueOver32768Exactly) {
  const std::vector<double> s = {-1.0, -0.5, 0.0, 1.0 / 32768, 32767.0 / 32768};
  Result<DecodedAudio> a = read_wav(make_wav(WavSpec{}, pcm_bytes(s, 16, false)));
  ASSERT_TRUE(a.is_ok());
  for (std::size_t i = 0; i < s.size(); ++i) EXPECT_EQ(a->samples[i], static_cast<float>(s[i]));
}

TEST(WavReader, Float32IsCopiedAndFloat64IsRoundedToFloat32) {
  const std::vector<double> s = signal(777);
  for (int bits : {32, 64}) {
    WavSpec spec;
    spec.format_tag = 3;
    spec.bits = static_cast<std::uint16_t>(bits);
    spec.chunks_before_data.push_back({"fact", {0x09, 0x03, 0x00, 0x00}});
    Result<DecodedAudio> a = read_wav(make_wav(spec, pcm_bytes(s, bits, true)));
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    ASSERT_EQ(a->samples.size(), s.size());
    for (std::size_t i = 0; i < s.size(); ++i) ASSERT_EQ(a->samples[i], static_cast<float>(s[i]));
  }
}

TEST(WavReader, ExtensibleFormatReadsPcmAndFloatSubFormats) {
  const std::vector<double> s = signal(500);
  WavSpec pcm;
  pcm.format_tag = 0xFFFE;
  pcm.sub_format = 1;
  pcm.bits = 24;
  Result<DecodedAudio> a = read_wav(make_wav(pcm, pcm_bytes(s, 24, false)));
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  for (std::size_t i = 0; i < s.size(); ++i) ASSERT_EQ(a->samples[i], expected_pcm(s[i], 24));
  WavSpec flt;
  flt.format_tag = 0xFFFE;
  flt.sub_format = 3;
  flt.bits = 32;
  a = read_wav(make_wav(flt, pcm_bytes(s, 32, true)));
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  for (std::size_t i = 0; i < s.size(); ++i) ASSERT_EQ(a->samples[i], static_cast<float>(s[i]));
}

TEST(WavReader, ChannelsAreAveragedInFloat32LikeNumpyMean) {
  for (int channels : {2, 3, 6}) {
    SCOPED_TRACE("channels " + std::to_string(channels));
    std::vector<std::vector<double>> ch;
    for (int c = 0; c < channels; ++c) ch.push_back(signal(400, 0.7 * c));
    WavSpec spec;
    spec.channels = static_cast<std::uint16_t>(channels);
    spec.format_tag = channels > 2 ? 0xFFFE : 1;
    spec.sample_rate = 44100;
    Result<DecodedAudio> a = read_wav(make_wav(spec, pcm_bytes(interleave(ch), 16, false)));
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    EXPECT_EQ(a->channels, channels);
    ASSERT_EQ(a->samples.size(), 400u);
    for (std::size_t i = 0; i < 400; ++i) {
      float sum = 0.0f;
      for (int c = 0; c < channels; ++c) sum += expected_pcm(ch[c][i], 16);
      ASSERT_EQ(a->samples[i], sum / static_cast<float>(channels)) << "frame " << i;
    }
  }
}

TEST(WavReader, SkipsListAndOddSizedChunksWithTheirPadByte) {
  const std::vector<double> s = signal(300);
  WavSpec spec;
  std::vector<std::uint8_t> list = {'I', 'N', 'F', 'O', 'I', 'N', 'A', 'M', 5, 0, 0, 0, 'h', 'e', 'l', 'l', 'o'};
  spec.chunks_before_data.push_back({"LIST", list});      // 17 bytes: odd, padded
  spec.chunks_before_data.push_back({"junk", {1, 2, 3}});  // odd again
  const std::vector<std::uint8_t> bytes = make_wav(spec, pcm_bytes(s, 16, false));
  Result<DecodedAudio> a = read_wav(bytes);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_EQ(a->samples.size(), s.size());
  for (std::size_t i = 0; i < s.size(); ++i) ASSERT_EQ(a->samples[i], expected_pcm(s[i], 16));
}

TEST(WavReader, OddSizedDataChunkFollowedByPadAndTrailingChunk) {
  // 8-bit mono with 5 samples: data is odd-sized, then its pad byte, then a trailing LIST chunk.
  WavSpec spec;
  spec.bits = 8;
  std::vector<std::uint8_t> bytes = make_wav(spec, {128, 192, 64, 255, 0});
  const std::vector<std::uint8_t> trailer = {'L', 'I', 'S', 'T', 4, 0, 0, 0, 'I', 'N', 'F', 'O'};
  bytes.insert(bytes.end(), trailer.begin(), trailer.end());
  Result<DecodedAudio> a = read_wav(bytes);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_EQ(a->samples.size(), 5u);
  EXPECT_EQ(a->samples[0], 0.0f);
  EXPECT_EQ(a->samples[1], 0.5f);
  EXPECT_EQ(a->samples[2], -0.5f);
  EXPECT_EQ(a->samples[3], 127.0f / 128.0f);
  EXPECT_EQ(a->samples[4], -1.0f);
}

TEST(WavReader, FmtAfterDataIsAccepted) {
  const std::vector<double> s = signal(64);
  std::vector<std::uint8_t> wav = make_wav(WavSpec{}, pcm_bytes(s, 16, false));
  // Move the 24-byte fmt chunk (at 12) behind the data chunk.
  std::vector<std::uint8_t> fmt(wav.begin() + 12, wav.begin() + 36);
  wav.erase(wav.begin() + 12, wav.begin() + 36);
  wav.insert(wav.end(), fmt.begin(), fmt.end());
  Result<DecodedAudio> a = read_wav(wav);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->samples.size(), s.size());
}

TEST(WavReader, OnlyTheFirstDataChunkIsRead) {
  // data, then a second data chunk, then fmt: the second data chunk is skipped.
  std::vector<std::uint8_t> wav = make_wav(WavSpec{}, pcm_bytes({0.5, 0.25}, 16, false));
  std::vector<std::uint8_t> fmt(wav.begin() + 12, wav.begin() + 36);
  wav.erase(wav.begin() + 12, wav.begin() + 36);
  const std::vector<std::uint8_t> second = {'d', 'a', 't', 'a', 2, 0, 0, 0, 0x00, 0x80};
  wav.insert(wav.end(), second.begin(), second.end());
  wav.insert(wav.end(), fmt.begin(), fmt.end());
  Result<DecodedAudio> a = read_wav(wav);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_EQ(a->samples.size(), 2u);
  EXPECT_EQ(a->samples[0], 0.5f);
  EXPECT_EQ(a->samples[1], 0.25f);
}

TEST(WavReader, StreamingDataSizeMeansTheRestOfTheFile) {
  const std::vector<double> s = signal(100);
  std::vector<std::uint8_t> wav = make_wav(WavSpec{}, pcm_bytes(s, 16, false));
  for (int i = 0; i < 4; ++i) wav[40 + i] = 0xFF;  // data size at byte 40
  Result<DecodedAudio> a = read_wav(wav);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->samples.size(), s.size());
}

// A failed read whose message names `what`.
void expect_failure(const std::vector<std::uint8_t>& bytes, StatusCode code, const std::string& what) {
  Result<DecodedAudio> a = read_wav(bytes);
  ASSERT_FALSE(a.is_ok());
  EXPECT_EQ(a.status().code(), code) << a.status().to_string();
  EXPECT_NE(a.status().message().find(what), std::string::npos) << a.status().message();
}

TEST(WavReader, TruncatedDataChunkFailsNamingChunkAndOffset) {
  std::vector<std::uint8_t> wav = make_wav(WavSpec{}, pcm_bytes(signal(100), 16, false));
  wav.resize(wav.size() - 51);
  expect_failure(wav, StatusCode::kInvalidArgument, "'data' chunk at byte 36");
  expect_failure(wav, StatusCode::kInvalidArgument, "truncated");
}

TEST(WavReader, TruncatedChunkHeaderAndChunkBodyFail) {
  std::vector<std::uint8_t> wav = make_wav(WavSpec{}, pcm_bytes(signal(10), 16, false));
  std::vector<std::uint8_t> head(wav.begin(), wav.begin() + 40);  // fmt, then 4 bytes of a header
  expect_failure(head, StatusCode::kInvalidArgument, "truncated chunk header at byte 36");
  std::vector<std::uint8_t> fmt_cut(wav.begin(), wav.begin() + 30);
  expect_failure(fmt_cut, StatusCode::kInvalidArgument, "'fmt ' chunk at byte 12");
  expect_failure(std::vector<std::uint8_t>(wav.begin(), wav.begin() + 8), StatusCode::kInvalidArgument, "12-byte");
}

TEST(WavReader, InconsistentFmtFails) {
  const std::vector<std::uint8_t> data = pcm_bytes(signal(10), 16, false);
  std::vector<std::uint8_t> wav = make_wav(WavSpec{}, data);
  std::vector<std::uint8_t> bad = wav;
  bad[32] = 3;  // block_align
  expect_failure(bad, StatusCode::kInvalidArgument, "block_align");
  bad = wav;
  bad[22] = 0;  // channels
  expect_failure(bad, StatusCode::kInvalidArgument, "channel count is 0");
  bad = wav;
  for (int i = 24; i < 28; ++i) bad[i] = 0;  // sample rate
  expect_failure(bad, StatusCode::kInvalidArgument, "sample rate");
  WavSpec twelve;
  twelve.bits = 12;
  expect_failure(make_wav(twelve, {0, 0}), StatusCode::kUnsupported, "12 bits");
  WavSpec alaw;
  alaw.format_tag = 6;
  alaw.bits = 8;
  expect_failure(make_wav(alaw, {0, 0}), StatusCode::kUnsupported, "0x0006");
  bad = wav;
  bad[16] = 14;  // fmt size 14
  expect_failure(bad, StatusCode::kInvalidArgument, "needs at least 16");
}

TEST(WavReader, MissingChunksAndWrongMagicFail) {
  std::vector<std::uint8_t> wav = make_wav(WavSpec{}, pcm_bytes(signal(10), 16, false));
  std::vector<std::uint8_t> no_data(wav.begin(), wav.begin() + 36);
  expect_failure(no_data, StatusCode::kInvalidArgument, "no 'data' chunk");
  std::vector<std::uint8_t> no_fmt = wav;
  no_fmt.erase(no_fmt.begin() + 12, no_fmt.begin() + 36);
  expect_failure(no_fmt, StatusCode::kInvalidArgument, "no 'fmt ' chunk");
  std::vector<std::uint8_t> rifx = wav;
  rifx[3] = 'X';
  expect_failure(rifx, StatusCode::kInvalidArgument, "RIFF/WAVE");
}

TEST(WavReader, DurationLimitIsCheckedBeforeDecoding) {
  WavSpec spec;
  spec.sample_rate = 1000;
  const std::vector<std::uint8_t> wav = make_wav(spec, pcm_bytes(signal(2500), 16, false));
  Result<DecodedAudio> a = read_wav(wav, 2.0);  // 2.5 s of audio
  ASSERT_FALSE(a.is_ok());
  EXPECT_EQ(a.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(a.status().message().find("limit"), std::string::npos) << a.status().message();
  EXPECT_TRUE(read_wav(wav, 2.5).is_ok());
  EXPECT_TRUE(read_wav(wav, 0.0).is_ok());  // 0 = no limit
}

TEST(AudioDecoder, WavCodecTheReaderLacksFallsBackToFfmpeg) {
  // G.711 A-law, 8 kHz mono: 0xD5 is the A-law code of 8 (the smallest positive step).
  WavSpec alaw;
  alaw.format_tag = 6;
  alaw.bits = 8;
  alaw.sample_rate = 8000;
  const std::vector<std::uint8_t> wav = make_wav(alaw, std::vector<std::uint8_t>(800, 0xD5));
  Result<DecodedAudio> a = decode_audio(wav);
  if (!ffmpeg_available()) {
    ASSERT_FALSE(a.is_ok());
    EXPECT_EQ(a.status().code(), StatusCode::kUnsupported);
    return;
  }
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->sample_rate, 8000);
  ASSERT_EQ(a->samples.size(), 800u);
  EXPECT_EQ(a->samples[0], 8.0f / 32768.0f);
}

}  // namespace
}  // namespace vv::audio
