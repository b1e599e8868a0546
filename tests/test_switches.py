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


def test_native_code_reads_no_switch():
    """The C runtime takes its settings from spine/switches.py, through the launch call (spine/driver/
    settings.py): no source under cpp/ reads a Spine or Proton variable itself, so each rule (what a valid
    timeout is, what a flag's "off" is) has one definition. The kernel server takes its own on its command
    line."""
    reads = re.compile(r"getenv\s*\(\s*\"((?:SPINE_|PROTON_)\w*)\"")
    read = {}
    for dirpath, _, filenames in os.walk(os.path.join(ROOT, "cpp")):
        for name in filenames:
            with open(os.path.join(dirpath, name), errors="replace") as f:
                found = reads.findall(f.read())
            if found:
                read[name] = found
    assert read == {}
    assert reads.search('std::getenv("SPINE_NUM_THREADS")'), "the pattern is stale"


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


# A value other than the default for every compile-affecting switch, and the target it matters for.
_OTHER_VALUES = {
    "SPINE_TARGET": ("host", None),
    "SPINE_HOST_CPU": ("x86-64-v3", "host"),
    "SPINE_HOST_FEATURES": ("+avx2,+fma", "host"),
    "SPINE_RISCV_CPU": ("sifive-x280", "riscv64"),
    "SPINE_RISCV_FEATURES": ("+64bit,+m,+a,+f,+d,+c,+v", "riscv64"),
    "SPINE_TRITON_DUMP_PATH": ("/tmp/spine-dump", None),
    "SPINE_DUMP_PASSES": ("/tmp/spine-passes", None),
    "TRITON_DISABLE_PROTON": ("1", None),
    "SPINE_STREAMING_STORES_MB": ("0", "host"),
    "SPINE_MATRIX_UNIT": ("0", "riscv64"),
}
# Changes which loaded kernels a process keeps, not what a compile produces (see its description).
_LOAD_ONLY = {"SPINE_REMOTE"}


def _disk_key() -> tuple:
    """What triton's on-disk cache key takes from the backend: its hash and the parsed options' hash."""
    from spine.compiler.backend import CPUBackend
    from spine.driver import CPUDriver
    backend = CPUBackend(CPUDriver().get_current_target())
    return backend.hash(), backend.parse_options({}).hash()


def test_every_compile_switch_changes_the_on_disk_cache_key(monkeypatch):
    """A switch in the in-process key but not on disk would load, from the cache, a kernel built under
    another value of it."""
    import triton.profiler.flags as proton_flags
    compile_switches = {s.name for s in switches.ALL if s.compile_key} - _LOAD_ONLY
    assert compile_switches == set(_OTHER_VALUES)
    monkeypatch.setattr(proton_flags.flags, "instrumentation_on", True)   # TRITON_DISABLE_PROTON matters
    for name, (value, target) in _OTHER_VALUES.items():
        with monkeypatch.context() as m:
            for other in _OTHER_VALUES:
                m.delenv(other, raising=False)
            if target:
                m.setenv("SPINE_TARGET", target)
            before = _disk_key()
            m.setenv(name, value)
            assert _disk_key() != before, name


def test_timeouts_reject_what_is_not_a_number_of_seconds(monkeypatch):
    """A negative, NaN or non-numeric timeout is an error, not some other timeout; `inf` and values past
    what C's nanosecond and poll's millisecond counts hold mean "never" (0.0), not an overflowed deadline."""
    import pytest
    for switch in (switches.KERNEL_TIMEOUT, switches.COMPILE_TIMEOUT):
        for bad in ("-1", "nan", "-inf", "later", "1_0"):
            monkeypatch.setenv(switch.name, bad)
            with pytest.raises(ValueError, match=switch.name):
                switch.get()
        for never in ("0", "inf", "1e10", "1e300"):
            monkeypatch.setenv(switch.name, never)
            assert switch.get() == 0.0
        monkeypatch.setenv(switch.name, "3000000")
        assert switch.get() == 3000000.0


def test_counts_reject_negative_values(monkeypatch):
    import pytest
    for switch in (switches.STREAMING_STORES_MB, switches.GRID_SPIN_US):
        monkeypatch.setenv(switch.name, "-5")
        with pytest.raises(ValueError, match=switch.name):
            switch.get()
