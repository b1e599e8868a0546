"""The known-failures table: every entry names a cause and a known group, and matches what it is meant to."""
from tests.conformance.known_failures import KNOWN_FAILURES, known_failure

GROUPS = {"frontend", "fork", "gpu", "spine"}


def test_every_entry_has_a_cause_and_group():
    for entry in KNOWN_FAILURES:
        assert entry.group in GROUPS and len(entry.cause) > 40, entry
        assert set(entry.targets) <= {"host", "riscv64"}, entry


def test_patterns_match_whole_ids_and_targets():
    assert known_failure("test_core.py::test_cat[False-int8-4]", "host").group == "frontend"
    assert known_failure("test_core.py::test_cat[True-int8-4]", "host") is None
    assert known_failure("test_tuple.py::test_tuple_constexpr_function", "riscv64").group == "frontend"
    assert known_failure("test_core.py::test_cast[1-float32-int32-False-1024]", "riscv64") is None
    assert known_failure("other_test_core.py::test_cat[False-int8-4]", "host") is None
