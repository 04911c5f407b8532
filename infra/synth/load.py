"""Loading environments for use: each file parsed and validated against the model (`infra.config`), then
held to the rules of the real systems (`infra.rules`), so a bad file fails naming the file, the field, the
value, the rule and its source. Every entry point loads through here; the config layer never calls the
rules itself."""

from __future__ import annotations

from pathlib import Path

from infra import settings
from infra.config import ConfigError, Environment
from infra.config.loading import ENVIRONMENTS_DIR, environment_file, environments_dir, load_each, parse_environment
from infra.rules import check_environment, check_environments


def load_environment(path: Path) -> Environment:
    """One environment file, validated and checked against every environment rule."""
    env = parse_environment(path)
    violations = check_environment(env)
    if violations:
        raise ConfigError(path, [v.line() for v in violations])
    return env


def load_named(name: str, directory: Path | None = None, *, argument: str = "ENV") -> Environment:
    """The environment called `name` (a name of the folder, never a path: `environment_file`), loaded with every
    other environment of its folder and held together with them, as `make plan` holds them: a command for one
    environment refuses what the plan would (a shared state bucket, a name taken twice)."""
    directory = directory or environments_dir()
    environment_file(name, directory, argument=argument)
    return load_all(directory)[name]


def load_all(directory: Path = ENVIRONMENTS_DIR) -> dict[str, Environment]:
    """Every environment file of `directory`; all faults of all files reported together."""
    return load_each(directory, load_environment, _together)


def _together(envs: dict[str, Environment]) -> dict[str, list[str]]:
    """Problem lines by environment name: the rules of every environment together."""
    return {name: [v.line() for v in found] for name, found in check_environments(envs).items()}


def load_planned(directory: Path = ENVIRONMENTS_DIR) -> dict[str, Environment]:
    """Every environment of `directory` (all loaded and checked), narrowed to those PLATFORM_ENVS names
    (comma-separated; `make plan ENV=` sets it for each of its steps)."""
    envs = load_all(directory)
    only = settings.ENVS.names()
    unknown = sorted(set(only) - set(envs))
    if unknown:
        raise ConfigError(
            directory,
            [f"PLATFORM_ENVS: {', '.join(unknown)}: no such environment file; environments: {', '.join(envs)}"],
        )
    return {name: envs[name] for name in only} if only else envs
