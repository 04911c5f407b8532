"""A first build says up front what it builds and about how long it takes (issue 55, first contact): the Go
programs and the providers take about half an hour on two cores with empty caches, and used to say so only one by
one as each ended."""

from __future__ import annotations

import pytest

from infra.engine import build, providers


def test_every_program_group_and_provider_has_its_measured_first_build() -> None:
    assert sorted(build.FIRST_BUILD_S) == sorted(build.components())
    assert sorted(providers.FIRST_BUILD_S) == sorted(providers.PROVIDERS)


def test_what_is_not_cached_is_named_with_the_time_it_takes(capsys: pytest.CaptureFixture[str]) -> None:
    build.expect(["kube", "kueue"], build.FIRST_BUILD_S, "Go program group(s)")
    said = capsys.readouterr().err
    assert said.startswith("build: 2 Go program group(s) to build from source (kube, kueue): about 9 min on two cores")
    build.expect([], build.FIRST_BUILD_S, "Go program group(s)")
    assert capsys.readouterr().err == ""
