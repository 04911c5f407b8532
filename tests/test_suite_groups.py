"""How `make test` shares the suite among its workers (tests/conftest.py)."""

from __future__ import annotations

from tests.conftest import LONGEST_FIRST, TESTS, XDIST_GROUPS, group_of


def test_a_test_module_is_grouped_by_its_path_below_tests_not_by_its_file_name() -> None:
    assert group_of(TESTS / "test_vllm.py") == "vllm"
    # Its file name is test_vllm.py's too; it shares the rules' rendered releases, not the real vLLM.
    assert group_of(TESTS / "rules" / "test_vllm.py") == "rules"
    assert group_of(TESTS / "unit" / "config" / "test_vllm.py") is None


def test_the_groups_handed_out_first_are_groups() -> None:
    assert set(LONGEST_FIRST) <= set(XDIST_GROUPS.values())
