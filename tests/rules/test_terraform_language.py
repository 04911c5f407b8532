"""The rules of `infra/rules/terraform_language.py`, each failing on its example: a change to dev's synthesized stack
(the dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

from typing import Any

import pytest

from infra.cdk import literal
from tests.helpers import of_type
from tests.rules.examples import (
    TerraformExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
)


def _raw_startup_script(stack: dict[str, Any]) -> None:
    """The VM group's startup script as the stack wrote it before the fix: bash's `${#hosts[@]}` unescaped."""
    (template,) = of_type(stack, "google_compute_instance_template").values()
    template["metadata"]["startup-script"] = template["metadata"]["startup-script"].replace("$${", "${")


TERRAFORM: dict[str, TerraformExample] = {
    # Before the fix: `tofu validate` refused dev and prod ("Invalid character", "Invalid expression").
    "tf.literal-text-escaped": (_raw_startup_script, "unescaped template sequence(s) that are not references"),
}


@pytest.mark.parametrize("rule_id", sorted(TERRAFORM))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, TERRAFORM[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("terraform_language", TERRAFORM)


def test_literal_text_escapes_only_the_template_sequences() -> None:
    assert literal("a=${A:-x} %{ if } $HOME $$ 100%") == "a=$${A:-x} %%{ if } $HOME $$ 100%"
    from infra.rules import RULES

    ok = {"resource": {"null_x": {"a": {"t": literal("${#hosts[@]} %{x}"), "r": "${null_x.b.id}"}}}}
    assert RULES["tf.literal-text-escaped"].run(ok) == []
    bad = {"resource": {"null_x": {"a": {"t": "echo %{x}"}}}}
    assert [v.field for v in RULES["tf.literal-text-escaped"].run(bad)] == ["null_x.a.t"]
