"""The CLI as a user meets it: --version and --help."""
import re
import subprocess


def run(vibevoice, *args):
    return subprocess.run([str(vibevoice), *args], capture_output=True, text=True, timeout=60)


def test_version_prints_semver_sha_and_features(vibevoice):
    r = run(vibevoice, "--version")
    assert r.returncode == 0, r.stderr
    assert re.match(r"^\d+\.\d+\.\d+ \(git ([0-9a-f]{7,12}|unknown)\) \[cpu[a-z0-9 ]*\]", r.stdout.strip()), r.stdout


def test_help_lists_commands(vibevoice):
    r = run(vibevoice, "--help")
    assert r.returncode == 0
    assert "vibevoice" in r.stdout


def test_unknown_command_fails(vibevoice):
    r = run(vibevoice, "no-such-command")
    assert r.returncode != 0
