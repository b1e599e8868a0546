"""cross/apt_sources.sh: the backports source is added from the archive the machine already uses."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _archive_serving(apt_dir, suite="bookworm") -> str:
    # as the installer runs it: a failing command anywhere in the pipeline ends the script
    script = f'set -euo pipefail; . "{ROOT}/cross/apt_sources.sh"; archive_serving {suite} "{apt_dir}"'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout.strip()


def test_a_deb822_source_lists_the_suite_among_others(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n"
        "Components: main\n\nTypes: deb\n# a comment\nURIs: http://mirror.example/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n")
    assert _archive_serving(tmp_path) == "http://mirror.example/debian"


def test_a_one_line_source_with_options(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(
        "# deb http://old.example/debian bookworm main\n"
        "deb http://security.example/debian-security bookworm-security main\n"
        "deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://mirror.example/debian bookworm main\n")
    assert _archive_serving(tmp_path) == "http://mirror.example/debian"


def test_no_source_serves_the_suite(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text("deb http://mirror.example/debian trixie main\n")
    assert _archive_serving(tmp_path) == ""


def test_only_a_deb822_source_and_no_sources_list(tmp_path):
    """Debian 12's images since 2023: no /etc/apt/sources.list at all."""
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n")
    assert _archive_serving(tmp_path) == "http://mirror.example/debian"
