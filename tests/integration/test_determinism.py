"""Determinism of `vibevoice transcribe`: the same file gives byte-identical output across runs and
thread counts, and a file transcribed in a batch of four different files gives the same bytes as the
file transcribed alone."""
import subprocess

CASES = ["jfk", "hotwords", "rate16k", "rate44k"]


def transcribe(vibevoice, golden_dir, data_dir, *args):
    cmd = [str(vibevoice), "transcribe", "--model", str(golden_dir / "model-hf"),
           "--tokenizer", str(data_dir / "tokenizer" / "tokenizer.json"), "--no-progress",
           "--max-new-tokens", "40", "--ignore-eos", *args]
    r = subprocess.run(cmd, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout


def test_same_bytes_across_runs_and_thread_counts(vibevoice, golden_dir, data_dir):
    audio = str(golden_dir / "cases" / "jfk" / "audio.wav")
    outs = {transcribe(vibevoice, golden_dir, data_dir, "--format", "verbose_json", "--threads", str(t), audio)
            for t in (1, 2, 1, 2)}
    assert len(outs) == 1
    ids = {transcribe(vibevoice, golden_dir, data_dir, "--format", "ids", "--threads", str(t), audio) for t in (1, 2)}
    assert len(ids) == 1


def test_file_in_a_batch_of_four_equals_the_file_alone(vibevoice, golden_dir, data_dir, tmp_path):
    audios = [str(golden_dir / "cases" / c / "audio.wav") for c in CASES]
    # Distinct names in the output directory: copy each case's audio under its case name.
    named = []
    for c, a in zip(CASES, audios):
        p = tmp_path / f"{c}.wav"
        p.write_bytes(open(a, "rb").read())
        named.append(str(p))
    out = tmp_path / "out"
    out.mkdir()
    transcribe(vibevoice, golden_dir, data_dir, "--format", "json", "-o", str(out), *named)
    for c, a in zip(CASES, named):
        alone = transcribe(vibevoice, golden_dir, data_dir, "--format", "json", a)
        batch_files = [f for f in out.iterdir() if f.name.startswith(c)]
        assert len(batch_files) == 1, [f.name for f in out.iterdir()]
        assert batch_files[0].read_bytes().strip() == alone.strip(), c
