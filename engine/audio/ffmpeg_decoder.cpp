// FFmpeg decoding from memory: a read/seek AVIOContext over the caller's bytes, the best audio
// stream, every frame converted to float32 (PCM16 v/32768 like soundfile) and averaged to mono in
// float32. The duration limit is checked after every decoded frame.
#include "engine/audio/ffmpeg_decoder.h"

#include <string>

#ifdef VV_HAVE_FFMPEG
extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <libavutil/channel_layout.h>
#include <libavutil/error.h>
#include <libavutil/mem.h>
}

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>
#endif

namespace vv::audio {

#ifndef VV_HAVE_FFMPEG

bool ffmpeg_available() { return false; }

Result<DecodedAudio> decode_with_ffmpeg(std::span<const std::uint8_t>, double) {
  return unsupported("audio: not a WAV file, and this build was built without FFmpeg, which other formats need");
}

#else

namespace {

std::string av_error(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(code, buf, sizeof buf);
  return buf;
}

// The caller's bytes as an FFmpeg input.
struct MemoryInput {
  const std::uint8_t* data = nullptr;
  std::int64_t size = 0;
  std::int64_t pos = 0;
};

int read_packet(void* opaque, std::uint8_t* buf, int buf_size) {
  auto* in = static_cast<MemoryInput*>(opaque);
  const std::int64_t left = in->size - in->pos;
  if (left <= 0) return AVERROR_EOF;
  const int n = static_cast<int>(std::min<std::int64_t>(left, buf_size));
  std::memcpy(buf, in->data + in->pos, static_cast<std::size_t>(n));
  in->pos += n;
  return n;
}

std::int64_t seek(void* opaque, std::int64_t offset, int whence) {
  auto* in = static_cast<MemoryInput*>(opaque);
  std::int64_t target = 0;
  switch (whence & ~AVSEEK_FORCE) {
    case AVSEEK_SIZE:
      return in->size;
    case SEEK_SET:
      target = offset;
      break;
    case SEEK_CUR:
      target = in->pos + offset;
      break;
    case SEEK_END:
      target = in->size + offset;
      break;
    default:
      return AVERROR(EINVAL);
  }
  if (target < 0 || target > in->size) return AVERROR(EINVAL);
  in->pos = target;
  return target;
}

// Owns every FFmpeg object of one decode; frees them in reverse order.
struct DecodeSession {
  MemoryInput input;
  AVIOContext* avio = nullptr;
  AVFormatContext* format = nullptr;
  AVCodecContext* codec = nullptr;
  AVPacket* packet = nullptr;
  AVFrame* frame = nullptr;

  ~DecodeSession() {
    av_frame_free(&frame);
    av_packet_free(&packet);
    avcodec_free_context(&codec);
    avformat_close_input(&format);
    if (avio != nullptr) av_freep(&avio->buffer);
    avio_context_free(&avio);
  }
};

// One sample of a (possibly planar) frame as float32, scaled as libsndfile scales PCM.
float frame_sample(const AVFrame* f, AVSampleFormat fmt, int channels, int i, int c) {
  const bool planar = av_sample_fmt_is_planar(fmt) != 0;
  const std::uint8_t* plane = planar ? f->extended_data[c] : f->extended_data[0];
  const int index = planar ? i : i * channels + c;
  switch (av_get_packed_sample_fmt(fmt)) {
    case AV_SAMPLE_FMT_U8:
      return static_cast<float>(static_cast<int>(plane[index]) - 128) * (1.0f / 128.0f);
    case AV_SAMPLE_FMT_S16: {
      std::int16_t v;
      std::memcpy(&v, plane + 2 * index, 2);
      return static_cast<float>(v) * (1.0f / 32768.0f);
    }
    case AV_SAMPLE_FMT_S32: {
      std::int32_t v;
      std::memcpy(&v, plane + 4 * index, 4);
      return static_cast<float>(v) * (1.0f / 2147483648.0f);
    }
    case AV_SAMPLE_FMT_S64: {
      std::int64_t v;
      std::memcpy(&v, plane + 8 * static_cast<std::size_t>(index), 8);
      return static_cast<float>(static_cast<double>(v) * (1.0 / 9223372036854775808.0));
    }
    case AV_SAMPLE_FMT_FLT: {
      float v;
      std::memcpy(&v, plane + 4 * index, 4);
      return v;
    }
    case AV_SAMPLE_FMT_DBL: {
      double v;
      std::memcpy(&v, plane + 8 * static_cast<std::size_t>(index), 8);
      return static_cast<float>(v);
    }
    default:
      return 0.0f;
  }
}

bool sample_format_known(AVSampleFormat fmt) {
  switch (av_get_packed_sample_fmt(fmt)) {
    case AV_SAMPLE_FMT_U8:
    case AV_SAMPLE_FMT_S16:
    case AV_SAMPLE_FMT_S32:
    case AV_SAMPLE_FMT_S64:
    case AV_SAMPLE_FMT_FLT:
    case AV_SAMPLE_FMT_DBL:
      return true;
    default:
      return false;
  }
}

Status open_input(std::span<const std::uint8_t> bytes, DecodeSession* s, int* stream_index) {
  s->input = {bytes.data(), static_cast<std::int64_t>(bytes.size()), 0};
  constexpr int kIoBufferSize = 1 << 16;
  auto* io_buffer = static_cast<std::uint8_t*>(av_malloc(kIoBufferSize));
  if (io_buffer == nullptr) return internal_error("FFmpeg: out of memory for the I/O buffer");
  s->avio = avio_alloc_context(io_buffer, kIoBufferSize, 0, &s->input, &read_packet, nullptr, &seek);
  if (s->avio == nullptr) {
    av_free(io_buffer);
    return internal_error("FFmpeg: avio_alloc_context failed");
  }
  s->format = avformat_alloc_context();
  if (s->format == nullptr) return internal_error("FFmpeg: avformat_alloc_context failed");
  s->format->pb = s->avio;
  s->format->flags |= AVFMT_FLAG_CUSTOM_IO;
  int rc = avformat_open_input(&s->format, nullptr, nullptr, nullptr);
  if (rc < 0) {
    // avformat_open_input frees the context on failure.
    return invalid_argument("audio: FFmpeg cannot open the " + std::to_string(bytes.size()) +
                            "-byte input as any known container: " + av_error(rc));
  }
  rc = avformat_find_stream_info(s->format, nullptr);
  if (rc < 0) return invalid_argument("audio: FFmpeg cannot read the stream info: " + av_error(rc));
  const AVCodec* decoder = nullptr;
  rc = av_find_best_stream(s->format, AVMEDIA_TYPE_AUDIO, -1, -1, &decoder, 0);
  if (rc == AVERROR_STREAM_NOT_FOUND) {
    return invalid_argument(std::string("audio: the ") + s->format->iformat->name + " input has no audio stream");
  }
  if (rc < 0 || decoder == nullptr) {
    return unsupported(std::string("audio: no FFmpeg decoder for the audio stream of the ") +
                       s->format->iformat->name + " input");
  }
  *stream_index = rc;
  s->codec = avcodec_alloc_context3(decoder);
  if (s->codec == nullptr) return internal_error("FFmpeg: avcodec_alloc_context3 failed");
  rc = avcodec_parameters_to_context(s->codec, s->format->streams[rc]->codecpar);
  if (rc < 0) return internal_error("FFmpeg: avcodec_parameters_to_context: " + av_error(rc));
  rc = avcodec_open2(s->codec, decoder, nullptr);
  if (rc < 0) return unsupported(std::string("audio: cannot open the ") + decoder->name + " decoder: " + av_error(rc));
  s->packet = av_packet_alloc();
  s->frame = av_frame_alloc();
  if (s->packet == nullptr || s->frame == nullptr) return internal_error("FFmpeg: out of memory for packet/frame");
  return Status::ok();
}

// Appends one decoded frame, downmixed; checks the format is stable and the limit not passed.
Status append_frame(const AVFrame* f, double max_seconds, DecodedAudio* out) {
  const int channels = f->ch_layout.nb_channels;
  const auto fmt = static_cast<AVSampleFormat>(f->format);
  if (channels <= 0) return invalid_argument("audio: decoded frame has no channels");
  if (f->sample_rate <= 0) return invalid_argument("audio: decoded frame has no sample rate");
  if (!sample_format_known(fmt)) {
    return unsupported(std::string("audio: decoder output sample format ") + av_get_sample_fmt_name(fmt));
  }
  if (out->sample_rate == 0) {
    out->sample_rate = f->sample_rate;
    out->channels = channels;
  } else if (out->sample_rate != f->sample_rate || out->channels != channels) {
    return unsupported("audio: the stream changes from " + std::to_string(out->sample_rate) + " Hz x " +
                       std::to_string(out->channels) + " ch to " + std::to_string(f->sample_rate) + " Hz x " +
                       std::to_string(channels) + " ch at sample " + std::to_string(out->samples.size()));
  }
  const std::size_t start = out->samples.size();
  if (max_seconds > 0.0 && static_cast<double>(start + static_cast<std::size_t>(f->nb_samples)) >
                               max_seconds * out->sample_rate) {
    return out_of_range("audio: longer than the " + std::to_string(max_seconds) + " s limit (stopped decoding at " +
                        std::to_string(static_cast<double>(start) / out->sample_rate) + " s)");
  }
  out->samples.resize(start + static_cast<std::size_t>(f->nb_samples));
  const float divisor = static_cast<float>(channels);
  for (int i = 0; i < f->nb_samples; ++i) {
    float sum = frame_sample(f, fmt, channels, i, 0);
    for (int c = 1; c < channels; ++c) sum += frame_sample(f, fmt, channels, i, c);
    out->samples[start + static_cast<std::size_t>(i)] = channels == 1 ? sum : sum / divisor;
  }
  return Status::ok();
}

// Drains every frame the decoder has ready.
Status receive_frames(DecodeSession* s, double max_seconds, DecodedAudio* out) {
  while (true) {
    const int rc = avcodec_receive_frame(s->codec, s->frame);
    if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return Status::ok();
    if (rc < 0) {
      return invalid_argument("audio: " + std::string(s->codec->codec->name) + " decoding failed after sample " +
                              std::to_string(out->samples.size()) + ": " + av_error(rc));
    }
    Status st = append_frame(s->frame, max_seconds, out);
    av_frame_unref(s->frame);
    VV_RETURN_IF_ERROR(st);
  }
}

}  // namespace

bool ffmpeg_available() { return true; }

Result<DecodedAudio> decode_with_ffmpeg(std::span<const std::uint8_t> bytes, double max_seconds) {
  static std::once_flag quiet;
  std::call_once(quiet, [] { av_log_set_level(AV_LOG_ERROR); });
  if (bytes.empty()) return invalid_argument("audio: the input is empty (0 bytes)");
  DecodeSession s;
  int stream_index = -1;
  VV_RETURN_IF_ERROR(open_input(bytes, &s, &stream_index));
  DecodedAudio out;
  while (true) {
    int rc = av_read_frame(s.format, s.packet);
    if (rc == AVERROR_EOF) break;
    if (rc < 0) {
      return invalid_argument("audio: reading the " + std::string(s.format->iformat->name) + " input failed at byte " +
                              std::to_string(s.input.pos) + ": " + av_error(rc));
    }
    if (s.packet->stream_index != stream_index) {
      av_packet_unref(s.packet);
      continue;
    }
    rc = avcodec_send_packet(s.codec, s.packet);
    av_packet_unref(s.packet);
    // Corrupt packets are skipped, as the ffmpeg CLI does; a file that yields nothing fails below.
    if (rc < 0 && rc != AVERROR(EAGAIN) && rc != AVERROR_INVALIDDATA) {
      return invalid_argument("audio: " + std::string(s.codec->codec->name) + " rejected a packet: " + av_error(rc));
    }
    VV_RETURN_IF_ERROR(receive_frames(&s, max_seconds, &out));
  }
  const int rc = avcodec_send_packet(s.codec, nullptr);  // flush
  if (rc >= 0) VV_RETURN_IF_ERROR(receive_frames(&s, max_seconds, &out));
  if (out.samples.empty()) {
    return invalid_argument("audio: the " + std::string(s.format->iformat->name) + " input decoded to no samples");
  }
  return out;
}

#endif  // VV_HAVE_FFMPEG

}  // namespace vv::audio
