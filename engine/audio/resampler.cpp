// soxr HQ resampling, following python-soxr 1.1.0's csoxr_divide_proc step for step: the same
// quality and I/O specs, the same output buffer bound, the same input chunking and one flush, so
// the samples match its output; then the length every reference uses.
#include "engine/audio/resampler.h"

#include <soxr.h>

#include <algorithm>
#include <string>
#include <utility>

namespace vv::audio {
namespace {

soxr_t create_hq(double in_r, double out_r, soxr_error_t* err) {
  const soxr_io_spec_t io_spec = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t quality_spec = soxr_quality_spec(SOXR_HQ, 0);
  return soxr_create(in_r, out_r, 1, err, &io_spec, &quality_spec, nullptr);
}

// prepare_resampler's object, unused, for one pair of rates. (Float output is never dithered, so
// soxr's per-object dither seed does not reach the samples.)
struct Spare {
  int in_rate = 0;
  int out_rate = 0;
  soxr_t soxr = nullptr;
  Spare() = default;
  Spare(const Spare&) = delete;
  Spare& operator=(const Spare&) = delete;
  ~Spare() { soxr_delete(soxr); }
};
thread_local Spare t_spare;

}  // namespace

void prepare_resampler(int in_rate, int out_rate) {
  if (in_rate <= 0 || out_rate <= 0 || in_rate == out_rate) return;
  if (t_spare.soxr != nullptr && t_spare.in_rate == in_rate && t_spare.out_rate == out_rate) return;
  soxr_delete(t_spare.soxr);
  soxr_error_t err = nullptr;
  t_spare.soxr = create_hq(in_rate, out_rate, &err);
  if (err != nullptr) t_spare.soxr = nullptr;  // resample_hq makes its own and reports the error
  t_spare.in_rate = in_rate;
  t_spare.out_rate = out_rate;
}

std::int64_t resampled_length(std::int64_t n, int in_rate, int out_rate) {
  if (n <= 0 || in_rate <= 0 || out_rate <= 0) return 0;
  const __int128 num = static_cast<__int128>(n) * out_rate;
  return static_cast<std::int64_t>((num + in_rate - 1) / in_rate);
}

Result<std::vector<float>> resample_hq(std::span<const float> x, int in_rate, int out_rate) {
  if (in_rate <= 0 || out_rate <= 0) {
    return invalid_argument("resample: rates must be positive (got " + std::to_string(in_rate) + " -> " +
                            std::to_string(out_rate) + " Hz)");
  }
  if (in_rate == out_rate) return std::vector<float>(x.begin(), x.end());
  const std::int64_t target = resampled_length(static_cast<std::int64_t>(x.size()), in_rate, out_rate);
  if (x.empty()) return std::vector<float>();

  const double in_r = in_rate;
  const double out_r = out_rate;
  soxr_error_t err = nullptr;
  soxr_t soxr = nullptr;
  if (t_spare.soxr != nullptr && t_spare.in_rate == in_rate && t_spare.out_rate == out_rate) {
    soxr = std::exchange(t_spare.soxr, nullptr);
  } else {
    soxr = create_hq(in_r, out_r, &err);
    if (err != nullptr) return internal_error(std::string("resample: soxr_create failed: ") + err);
  }

  const std::size_t ilen = x.size();
  const std::size_t olen = static_cast<std::size_t>(static_cast<double>(ilen) * out_r / in_r + 1);
  const std::size_t chunk_len = std::max<std::size_t>(1, static_cast<std::size_t>(48000 * in_r / out_r));
  std::vector<float> y(std::max<std::size_t>(olen, static_cast<std::size_t>(target)), 0.0f);

  std::size_t out_pos = 0;
  std::size_t odone = 0;
  for (std::size_t idx = 0; idx < ilen && err == nullptr; idx += chunk_len) {
    err = soxr_process(soxr, x.data() + idx, std::min(chunk_len, ilen - idx), nullptr, y.data() + out_pos,
                       olen - out_pos, &odone);
    out_pos += odone;
  }
  if (err == nullptr) {
    err = soxr_process(soxr, nullptr, 0, nullptr, y.data() + out_pos, olen - out_pos, &odone);
    out_pos += odone;
  }
  soxr_delete(soxr);
  if (err != nullptr) return internal_error(std::string("resample: soxr_process failed: ") + err);

  // Samples past out_pos are already zero: this zero-pads or trims to the reference length.
  y.resize(static_cast<std::size_t>(target));
  return y;
}

}  // namespace vv::audio
