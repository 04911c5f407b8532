"""A training job's `resilience`: its restarts, the exit codes that mean retry, and what the review says a failure
costs."""

from __future__ import annotations

from pathlib import Path
from unittest.mock import patch

import pytest
import yaml

from infra.config import ENVIRONMENTS_DIR, ConfigError
from infra.config.training import Resilience, TrainingResilience
from infra.synth.load import load_environment
from tests.helpers import REPO
from workloads.trainer.recipes import get_recipe
from workloads.trainer.recovery import recovery_lines

DEV = (ENVIRONMENTS_DIR / "dev.yaml").read_text()


def _dev_with(tmp_path: Path, edit: object) -> Path:
    data = yaml.safe_load(DEV)
    edit(data)  # type: ignore[operator]
    path = tmp_path / "dev.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_exit_codes_and_ranges_expand_to_the_codes_a_pod_failure_policy_lists() -> None:
    assert Resilience(retry_exit_codes=[143, "128-130", 42]).exit_codes == [42, 128, 129, 130, 143]
    assert Resilience().exit_codes == []
    with pytest.raises(ValueError, match="not a range of exit codes within 1-255"):
        Resilience(retry_exit_codes=["200-300"])
    with pytest.raises(ValueError, match="less than or equal to 255"):
        Resilience(retry_exit_codes=[256])


def test_the_old_max_failures_is_refused_with_where_it_moved(tmp_path: Path) -> None:
    path = _dev_with(tmp_path, lambda d: d["training"].update(max_failures=5))
    with pytest.raises(ConfigError) as refused:
        load_environment(path)
    said = str(refused.value)
    assert str(path) in said and "training" in said
    assert "max_failures (5) is now resilience.max_restarts: write `resilience: {max_restarts: 5}`" in said


def test_the_checkpoint_a_host_saves_follows_the_recipes_sharding() -> None:
    dev = load_environment(ENVIRONMENTS_DIR / "dev.yaml")
    v6e16 = dev.slices["train"].slice
    fsdp = get_recipe("llama3-8b")  # fsdp 16 over 16 chips: each of 4 hosts holds a quarter, bf16 weights
    assert fsdp.checkpoint_gb == pytest.approx(8.03 * 3 * 2)
    assert fsdp.checkpoint_gb_per_host(v6e16) == pytest.approx(48.18 / 4)
    tutorial = get_recipe("llama3-8b-tutorial")  # fsdp 4 x tensor 4, float32 weights
    assert tutorial.checkpoint_gb_per_host(v6e16) == pytest.approx(8.03 * 3 * 4 / 16 * 4)
    assert fsdp.step_seconds == pytest.approx(3 * 8192 / 7243)
    assert get_recipe("llama3-8b-2-slices").step_seconds is None  # no published figure: steps only


def test_the_review_says_what_a_failure_costs_each_training_job() -> None:
    lines = recovery_lines(load_environment(ENVIRONMENTS_DIR / "dev.yaml"))
    text = "\n".join(lines)
    assert lines[0].startswith("training (Ray, slice train: 1 x v6e-16), recipe llama3-8b: up to 3 restarts")
    assert "12.0 GB per host (4 hosts a slice)" in text
    assert "most work a failure can lose: 50 steps (2.8 min at 7,243 tokens/s/chip)" in text
    assert "25 steps (85 s at 7,243 tokens/s/chip) redone on average" in text
    assert "batch.training (JobSet, slice a3mega): up to 3 restarts on exit codes 42, 128-255" in text


def test_the_review_prices_a_lost_slice_in_each_mode_restart_and_elastic() -> None:
    """Two v6e-16 slices, elastic down to one (docs/examples/multislice): restart would hold the slice left idle,
    at its list price (16 chips at 2.70 USD an hour in us-east5); elastic trains on it. With a published step time
    the half period redone is priced too."""
    example = REPO / "docs/examples/multislice/dev.yaml"
    elastic = load_environment(example)
    text = "\n".join(recovery_lines(elastic))
    assert "one of the 2 slices lost (training.resilience.min_slices: elastic, down to 1 slice):" in text
    assert "restart: the 1 slice left waits idle and paid for (43.20 USD an hour) until the lost one is back" in text
    assert "elastic: the 1 slice left goes on at once: 25 steps redone on average on 1 slice" in text
    assert "1/2 of the throughput until the slice is back; nothing waits idle" in text

    fixed = elastic.model_copy(
        update={"training": elastic.training.model_copy(update={"resilience": TrainingResilience()})}  # type: ignore[union-attr]
    )
    text = "\n".join(recovery_lines(fixed))
    assert "(training.resilience.min_slices: restart, a fixed 2 slices)" in text
    assert "elastic: off (training.resilience.min_slices unset)" in text
    # A recipe with a published throughput: half a period on both slices, priced.
    timed = get_recipe("llama3-8b-2-slices").model_copy(update={"tokens_per_second_per_chip": 7243.0})
    with patch("workloads.trainer.recovery.named_recipe", return_value=timed):
        text = "\n".join(recovery_lines(fixed))
    seconds = 25 * 2 * 8192 / 7243
    assert f"redone on average on 2 slices, {2 * 43.2 * seconds / 3600:,.2f} USD, plus the restart" in text
    one_slice = "\n".join(recovery_lines(load_environment(ENVIRONMENTS_DIR / "dev.yaml")))
    assert "slices lost" not in one_slice
