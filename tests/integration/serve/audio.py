"""Test audio made at test time (never committed): ffmpeg / espeak-ng from the bundled golden WAVs.

Names follow API.md §15: tiny.wav = 3 s 16 kHz mono speech; two.wav = >= 10 s with two voices;
long.wav = 600 s of speech. Everything is cached per session under the given directory."""
import math
import pathlib
import shutil
import struct
import subprocess
import wave

import pytest


def need(tool):
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed: {r.stderr.decode(errors='replace')[-2000:]}")


def ffmpeg(*args):
    need("ffmpeg")
    run(["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y", *map(str, args)])


def wav_info(path):
    with wave.open(str(path)) as w:
        return w.getframerate(), w.getnchannels(), w.getnframes()


class AudioFactory:
    def __init__(self, root, golden_dir):
        self.root = pathlib.Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.golden = pathlib.Path(golden_dir)

    def _src(self):
        """A speech WAV from the golden set (jfk: 11 s of 16 kHz speech)."""
        for p in (self.golden / "cases" / "jfk" / "audio.wav",):
            if p.exists():
                return p
        cands = sorted(self.golden.glob("cases/*/audio.wav"))
        if not cands:
            pytest.skip("no speech WAV in the golden set")
        return cands[0]

    def path(self, name):
        p = self.root / name
        if not p.exists():
            getattr(self, "_make_" + name.replace(".", "_").replace("-", "_"))(p)
        return p

    def bytes(self, name):
        return self.path(name).read_bytes()

    # ---- the §15 files --------------------------------------------------------------------------
    def _make_tiny_wav(self, p):
        # 3 s of speech, 16 kHz mono s16: if the source is shorter, loop it.
        ffmpeg("-stream_loop", "-1", "-i", self._src(), "-t", "3", "-ac", "1", "-ar", "16000",
               "-c:a", "pcm_s16le", p)

    def _make_voice2_wav(self, p):
        if shutil.which("espeak-ng"):
            raw = self.root / "voice2-raw.wav"
            run(["espeak-ng", "-v", "en-us+f3", "-s", "150", "-w", str(raw),
                 "Happy to be here. Shall we start? Yes, let us begin with the budget for next year."])
            ffmpeg("-i", raw, "-ac", "1", "-ar", "16000", "-c:a", "pcm_s16le", p)
        else:  # a second "voice": the same speech pitched up
            ffmpeg("-i", self._src(), "-t", "4", "-af", "asetrate=20000,aresample=16000", "-ac", "1",
                   "-ar", "16000", "-c:a", "pcm_s16le", p)

    def _make_two_wav(self, p):
        v1 = self._src()
        v2 = self.path("voice2.wav")
        ffmpeg("-i", v1, "-i", v2, "-filter_complex",
               "[0:a]aresample=16000,aformat=channel_layouts=mono[a];"
               "[1:a]aresample=16000,aformat=channel_layouts=mono[b];[a][b]concat=n=2:v=0:a=1,apad=whole_dur=10.5",
               "-ac", "1", "-ar", "16000", "-c:a", "pcm_s16le", p)

    def _make_long_wav(self, p):
        ffmpeg("-stream_loop", "-1", "-i", self._src(), "-t", "600", "-ac", "1", "-ar", "16000",
               "-c:a", "pcm_s16le", p)

    def _make_long61_wav(self, p):
        ffmpeg("-stream_loop", "-1", "-i", self._src(), "-t", "61", "-ac", "1", "-ar", "16000",
               "-c:a", "pcm_s16le", p)

    def _make_short005_wav(self, p):
        ffmpeg("-i", self._src(), "-t", "0.05", "-ac", "1", "-ar", "16000", "-c:a", "pcm_s16le", p)

    def _make_half_wav(self, p):
        ffmpeg("-i", self._src(), "-t", "0.5", "-ac", "1", "-ar", "16000", "-c:a", "pcm_s16le", p)

    def _make_two_s_wav(self, p):
        ffmpeg("-stream_loop", "-1", "-i", self._src(), "-t", "2", "-ac", "1", "-ar", "16000",
               "-c:a", "pcm_s16le", p)

    def _make_silence10_wav(self, p):
        with wave.open(str(p), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes(b"\0\0" * 160000)

    def _make_stereo44k_wav(self, p):
        ffmpeg("-i", self.path("tiny.wav"), "-af", "aresample=44100", "-ac", "2", "-ar", "44100",
               "-c:a", "pcm_s16le", p)

    def _make_silence10h_flac(self, p):
        # 10 h of digital silence: tiny on disk, huge once decoded (the decode-bomb case of C27).
        ffmpeg("-f", "lavfi", "-i", "anullsrc=r=8000:cl=mono", "-t", "36000", "-c:a", "flac",
               "-frame_size", "65535", "-compression_level", "0", p)

    # ---- containers and codecs for C25 ----------------------------------------------------------
    def _enc(self, p, *codec, src=None):
        ffmpeg("-i", src or self.path("tiny.wav"), *codec, p)

    def _make_f32_wav(self, p):
        self._enc(p, "-c:a", "pcm_f32le")

    def _make_mulaw_wav(self, p):
        self._enc(p, "-c:a", "pcm_mulaw", "-ar", "8000")

    def _make_tiny_flac(self, p):
        self._enc(p, "-c:a", "flac")

    def _make_tiny_mp3(self, p):
        self._enc(p, "-c:a", "libmp3lame", "-b:a", "64k")

    def _make_opus_ogg(self, p):
        self._enc(p, "-c:a", "libopus", "-b:a", "32k", "-f", "ogg")

    def _make_vorbis_ogg(self, p):
        self._enc(p, "-c:a", "libvorbis", "-q:a", "3", "-f", "ogg")

    def _make_tiny_webm(self, p):
        self._enc(p, "-c:a", "libopus", "-b:a", "32k", "-f", "webm")

    def _make_tiny_m4a(self, p):
        self._enc(p, "-c:a", "aac", "-b:a", "64k", "-f", "ipod")

    def _make_video_mp4(self, p):
        ffmpeg("-f", "lavfi", "-i", "color=c=black:s=64x64:r=10", "-i", self.path("tiny.wav"), "-shortest",
               "-c:v", "mpeg4", "-c:a", "aac", "-b:a", "64k", "-f", "mp4", p)

    def _make_long_mp3(self, p):
        # 20 s of speech as MP3 (C28 cuts it in half).
        ffmpeg("-stream_loop", "-1", "-i", self._src(), "-t", "20", "-ac", "1", "-ar", "16000",
               "-c:a", "libmp3lame", "-b:a", "64k", p)

    def _make_mandarin_wav(self, p):
        need("espeak-ng")
        raw = self.root / "zh-raw.wav"
        run(["espeak-ng", "-v", "cmn", "-w", str(raw), "你好世界。今天天气很好。"])
        ffmpeg("-i", raw, "-ac", "1", "-ar", "16000", "-c:a", "pcm_s16le", p)

    def _make_png_png(self, p):
        # A valid 1x1 PNG.
        import zlib

        def chunk(t, d):
            return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
        p.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)) +
                      chunk(b"IDAT", zlib.compress(b"\0\0")) + chunk(b"IEND", b""))


def duration_of(path):
    rate, _, frames = wav_info(path)
    return frames / rate


def samples_24k(seconds):
    return int(round(seconds * 24000))


def audio_tokens(seconds):
    return math.ceil(samples_24k(seconds) / 3200)
