"""`vibevoice transcribe` end to end on the bundled tiny model: the debug ids contract against the
golden ids, and every response format."""
import json
import subprocess

import pytest

CASES = ["short", "jfk", "hotwords", "rate16k", "rate44k"]


def transcribe(vibevoice, golden_dir, data_dir, *args):
    cmd = [str(vibevoice), "transcribe", "--model", str(golden_dir / "model-hf"),
           "--tokenizer", str(data_dir / "tokenizer" / "tokenizer.json"), "--no-progress", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("case", CASES)
def test_ids_equal_golden(vibevoice, golden_dir, data_dir, case):
    g = json.loads((golden_dir / "cases" / case / "golden.json").read_text())
    extra = ["--prompt", g["context_info"]] if g.get("context_info") else []
    r = transcribe(vibevoice, golden_dir, data_dir, "--format", "ids", "--max-new-tokens",
                   str(len(g["generated_ids"])), "--ignore-eos", *extra,
                   str(golden_dir / "cases" / case / "audio.wav"))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["prompt_ids"] == g["prompt_ids"]
    assert out["generated_ids"] == g["generated_ids"]


@pytest.mark.parametrize("fmt", ["text", "json", "verbose_json", "srt", "vtt", "diarized_json"])
def test_every_format_succeeds(vibevoice, golden_dir, data_dir, fmt):
    r = transcribe(vibevoice, golden_dir, data_dir, "--format", fmt, "--max-new-tokens", "16",
                   str(golden_dir / "cases" / "short" / "audio.wav"))
    assert r.returncode == 0, r.stderr
    if fmt in ("json", "verbose_json", "diarized_json"):
        assert "text" in json.loads(r.stdout)


def test_missing_audio_names_the_file(vibevoice, golden_dir, data_dir, tmp_path):
    r = transcribe(vibevoice, golden_dir, data_dir, str(tmp_path / "nope.wav"))
    assert r.returncode != 0
    assert "nope.wav" in r.stderr
