"""Every environment switch is declared once (spine/switches.py) and documented in the README."""
import os
import re

from spine import switches

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_switch_is_documented():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    assert [s.name for s in switches.ALL if f"`{s.name}`" not in readme] == []


def test_switches_are_read_only_through_the_list():
    """No module reads a Spine or Proton variable from the environment by itself."""
    reads = re.compile(r"environ(?:\.get)?[\[(]\s*[\"'](SPINE_|PROTON_)")
    offenders = []
    for dirpath, _, filenames in os.walk(os.path.join(ROOT, "spine")):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if name.endswith(".py") and not path.endswith(os.path.join("spine", "switches.py")):
                with open(path) as f:
                    if reads.search(f.read()):
                        offenders.append(os.path.relpath(path, ROOT))
    assert offenders == []


def test_native_code_reads_only_declared_switches():
    """The launch fast path reads a few variables in C++ (no Python per launch); each must be declared."""
    declared = {s.name for s in switches.ALL}
    read = set()
    for dirpath, _, filenames in os.walk(os.path.join(ROOT, "cpp")):
        for name in filenames:
            with open(os.path.join(dirpath, name), errors="replace") as f:
                read |= set(re.findall(r"getenv\(\s*\"((?:SPINE_|PROTON_)\w+)\"", f.read()))
    assert read, "the C++ launcher reads SPINE_NUM_THREADS and PROTON_KERNEL_CAPTURE; the pattern is stale"
    assert read - declared == set()


def test_compile_key_follows_the_environment(monkeypatch):
    before = switches.compile_key_values()
    monkeypatch.setenv("SPINE_HOST_CPU", "znver4")
    assert switches.compile_key_values() != before


def test_the_launch_fast_paths_environment_follows_every_change(monkeypatch):
    """The extension keeps its last answer while the environment's entries stay the same (cpp/launch.cpp):
    setting, replacing and removing a variable through os.environ each give a new one."""
    import pytest
    from spine.driver.launcher import launch_extension
    extension = launch_extension()
    if extension is None:
        pytest.skip("no launch fast path on this machine")
    names = ("SPINE_TEST_ENV_A", "SPINE_TEST_ENV_B")
    monkeypatch.delenv(names[0], raising=False)
    monkeypatch.delenv(names[1], raising=False)
    assert extension.environment(names) == (None, None)
    assert extension.environment(names) == (None, None)
    monkeypatch.setenv(names[0], "1")
    assert extension.environment(names) == (b"1", None)
    monkeypatch.setenv(names[0], "2")
    assert extension.environment(names) == (b"2", None)
    monkeypatch.setenv(names[1], "x")
    assert extension.environment(names) == (b"2", b"x")
    assert extension.environment(names[:1]) == (b"2",)      # other names: read anew
    monkeypatch.delenv(names[0])
    assert extension.environment(names) == (None, b"x")


def test_bad_values_say_what_was_expected(monkeypatch):
    import pytest
    monkeypatch.setenv("SPINE_NUM_THREADS", "lots")
    with pytest.raises(ValueError, match="SPINE_NUM_THREADS='lots': expected a positive integer"):
        switches.NUM_THREADS.get()
