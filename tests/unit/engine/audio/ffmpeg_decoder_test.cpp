// FFmpeg in-memory decoding: a WAV written here is encoded by the ffmpeg CLI to FLAC, MP3, Opus and
// M4A (AAC); decoding each from memory must give that WAV's samples: FLAC exactly, the lossy codecs
// with their encoder delay already removed (best alignment at lag 0) and a correlation/SNR bound.
#include "engine/audio/ffmpeg_decoder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numbers>
#include <string>
#include <vector>

#include "engine/audio/audio_decoder.h"
#include "engine/audio/wav_reader.h"
#include "tests/support/test_paths.h"
#include "tests/unit/engine/audio/audio_test_files.h"

namespace vv::audio {
namespace {

using audio_test::make_wav;
using audio_test::pcm_bytes;
using audio_test::read_bytes;
using audio_test::run_command;
using audio_test::WavSpec;
using audio_test::write_bytes;

bool have_ffmpeg_cli() {
  return run_command("ffmpeg -hide_banner -version > /dev/null 2>&1") == 0;
}

// A 2-channel test signal: a few tones under a slow envelope, different in each channel.
std::vector<std::uint8_t> test_wav(int rate, int channels, double seconds, int bits = 16) {
  const std::size_t n = static_cast<std::size_t>(rate * seconds);
  std::vector<double> s;
  for (std::size_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) / rate;
    const double env = 0.6 + 0.4 * std::sin(2.0 * std::numbers::pi * 1.3 * t);
    for (int c = 0; c < channels; ++c) {
      const double v = 0.25 * std::sin(2 * std::numbers::pi * (310.0 + 40 * c) * t) +
                       0.15 * std::sin(2 * std::numbers::pi * 1234.0 * t + c) +
                       0.08 * std::sin(2 * std::numbers::pi * 2750.0 * t);
      s.push_back(env * v);
    }
  }
  WavSpec spec;
  spec.channels = static_cast<std::uint16_t>(channels);
  spec.sample_rate = static_cast<std::uint32_t>(rate);
  spec.bits = static_cast<std::uint16_t>(bits);
  return make_wav(spec, pcm_bytes(s, bits, false));
}

// Encodes `wav` with the ffmpeg CLI; returns the encoded bytes (empty on failure).
std::vector<std::uint8_t> encode(const std::vector<std::uint8_t>& wav, const std::string& ext,
                                 const std::string& args) {
  const std::string dir = vv::test::make_temp_dir("vv_audio_ffmpeg");
  const std::string in = dir + "/in.wav";
  const std::string out = dir + "/out." + ext;
  write_bytes(in, wav);
  const std::string cmd = "ffmpeg -hide_banner -loglevel error -y -i " + in + " " + args + " " + out;
  std::vector<std::uint8_t> bytes;
  if (run_command(cmd) == 0) bytes = read_bytes(out);
  std::filesystem::remove_all(dir);
  return bytes;
}

struct Alignment {
  int lag = 0;               // decoded[i + lag] ~ reference[i]
  double correlation = 0.0;  // normalised, at that lag
  double snr_db = 0.0;       // reference power / error power at that lag, after least-squares gain
};

// Correlation of ref[i] with dec[i + lag] over the middle of the clip (codec start-up and tail left
// out), every `stride`-th sample.
Alignment score(const std::vector<float>& ref, const std::vector<float>& dec, int lag, std::size_t stride) {
  const std::size_t skip = 4096;
  double xy = 0, xx = 0, yy = 0;
  for (std::size_t i = skip; i + skip < ref.size(); i += stride) {
    const std::int64_t j = static_cast<std::int64_t>(i) + lag;
    if (j < 0 || j >= static_cast<std::int64_t>(dec.size())) continue;
    xy += static_cast<double>(ref[i]) * dec[j];
    xx += static_cast<double>(ref[i]) * ref[i];
    yy += static_cast<double>(dec[j]) * dec[j];
  }
  Alignment a;
  a.lag = lag;
  a.correlation = xy / std::sqrt(xx * yy + 1e-30);
  const double gain = xy / yy;
  const double err = xx - 2 * gain * xy + gain * gain * yy;
  a.snr_db = 10.0 * std::log10(xx / std::max(err, 1e-30));
  return a;
}

// The lag in [-max_lag, max_lag] that best aligns dec to ref: every lag scored on every 8th sample,
// then the 17 lags around the best scored on every sample (a full search costs ~8x more, which the
// sanitizer build pays 30x over).
Alignment align(const std::vector<float>& ref, const std::vector<float>& dec, int max_lag) {
  int coarse = 0;
  double best_c = -2.0;
  for (int lag = -max_lag; lag <= max_lag; ++lag) {
    const double c = score(ref, dec, lag, 8).correlation;
    if (c > best_c) {
      best_c = c;
      coarse = lag;
    }
  }
  Alignment best;
  best.correlation = -2.0;
  for (int lag = std::max(-max_lag, coarse - 8); lag <= std::min(max_lag, coarse + 8); ++lag) {
    const Alignment a = score(ref, dec, lag, 1);
    if (a.correlation > best.correlation) best = a;
  }
  return best;
}

TEST(FfmpegDecoder, Flac16And24BitDecodeToTheWavSamplesExactly) {
  if (!ffmpeg_available()) GTEST_SKIP() << "built without FFmpeg";
  ASSERT_TRUE(have_ffmpeg_cli()) << "the ffmpeg CLI is needed to make the test files";
  for (int bits : {16, 24}) {
    SCOPED_TRACE("bits " + std::to_string(bits));
    const std::vector<std::uint8_t> wav = test_wav(16000, 2, 2.0, bits);
    const std::vector<std::uint8_t> flac = encode(wav, "flac", "-c:a flac");
    ASSERT_FALSE(flac.empty());
    Result<DecodedAudio> ref = read_wav(wav);
    Result<DecodedAudio> dec = decode_audio(flac);
    ASSERT_TRUE(ref.is_ok() && dec.is_ok()) << dec.status().to_string();
    EXPECT_EQ(dec->sample_rate, 16000);
    EXPECT_EQ(dec->channels, 2);
    EXPECT_EQ(dec->samples, ref->samples);
  }
}

struct LossyCase {
  const char* ext;
  const char* args;
  int rate;
  double min_correlation;
  double min_snr_db;
};

TEST(FfmpegDecoder, LossyCodecsDecodeAlignedToTheWavWithinCodecTolerance) {
  if (!ffmpeg_available()) GTEST_SKIP() << "built without FFmpeg";
  ASSERT_TRUE(have_ffmpeg_cli()) << "the ffmpeg CLI is needed to make the test files";
  const LossyCase cases[] = {
      {"mp3", "-c:a libmp3lame -b:a 192k", 44100, 0.999, 40.0},
      {"opus", "-c:a libopus -b:a 128k", 48000, 0.999, 30.0},
      {"m4a", "-c:a aac -b:a 192k", 44100, 0.999, 25.0},
      {"ogg", "-c:a libvorbis -q:a 6", 44100, 0.999, 30.0},
  };
  for (const LossyCase& c : cases) {
    SCOPED_TRACE(c.ext);
    const std::vector<std::uint8_t> wav = test_wav(c.rate, 2, 2.0);
    const std::vector<std::uint8_t> encoded = encode(wav, c.ext, c.args);
    ASSERT_FALSE(encoded.empty()) << "ffmpeg could not encode " << c.ext;
    Result<DecodedAudio> ref = read_wav(wav);
    Result<DecodedAudio> dec = decode_audio(encoded);
    ASSERT_TRUE(ref.is_ok() && dec.is_ok()) << dec.status().to_string();
    EXPECT_EQ(dec->sample_rate, c.rate);
    EXPECT_EQ(dec->channels, 2);
    const Alignment a = align(ref->samples, dec->samples, 3000);
    const long long length_diff =
        static_cast<long long>(dec->samples.size()) - static_cast<long long>(ref->samples.size());
    std::printf("[ %-4s ] %zu bytes, decoded %zu of %zu samples (%+lld), lag %d, corr %.6f, SNR %.1f dB\n",
                c.ext, encoded.size(), dec->samples.size(), ref->samples.size(), length_diff, a.lag,
                a.correlation, a.snr_db);
    EXPECT_EQ(a.lag, 0) << "encoder delay not removed";
    EXPECT_GE(a.correlation, c.min_correlation);
    EXPECT_GE(a.snr_db, c.min_snr_db);
    // FFmpeg (like its CLI) trims the start delay; AAC in MP4 keeps the last frame's padding.
    EXPECT_LE(std::llabs(length_diff), 1200) << "decoded length far from the source";
  }
}

TEST(FfmpegDecoder, DurationLimitStopsDecoding) {
  if (!ffmpeg_available()) GTEST_SKIP() << "built without FFmpeg";
  ASSERT_TRUE(have_ffmpeg_cli());
  const std::vector<std::uint8_t> flac = encode(test_wav(16000, 1, 3.0), "flac", "-c:a flac");
  ASSERT_FALSE(flac.empty());
  Result<DecodedAudio> dec = decode_with_ffmpeg(flac, 1.5);
  ASSERT_FALSE(dec.is_ok());
  EXPECT_EQ(dec.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(dec.status().message().find("limit"), std::string::npos) << dec.status().message();
  EXPECT_TRUE(decode_with_ffmpeg(flac, 3.0).is_ok());
}

TEST(FfmpegDecoder, GarbageAndEmptyInputFailWithAMessage) {
  if (!ffmpeg_available()) {
    Result<DecodedAudio> dec = decode_audio(std::vector<std::uint8_t>(64, 7));
    ASSERT_FALSE(dec.is_ok());
    EXPECT_NE(dec.status().message().find("without FFmpeg"), std::string::npos);
    return;
  }
  std::vector<std::uint8_t> junk(5000);
  for (std::size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<std::uint8_t>((i * 2654435761u) >> 13);
  Result<DecodedAudio> dec = decode_with_ffmpeg(junk);
  ASSERT_FALSE(dec.is_ok());
  EXPECT_FALSE(dec.status().message().empty());
  dec = decode_with_ffmpeg({});
  ASSERT_FALSE(dec.is_ok());
  EXPECT_EQ(dec.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vv::audio
