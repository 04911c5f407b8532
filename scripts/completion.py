"""Shell completion for `platform`: `eval "$(platform completion bash)"` (or `zsh`, through zsh's bashcompinit).

The script is written once, with each command's flags read from its own `--help` (as bash-completion's `_longopt`
reads a program's), so a tab costs no Python start; what changes with the repository (the environments, the
images, the training recipes) is asked at the tab from `platform __complete <kind>`, which reads the files with
the standard library only.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
from pathlib import Path

from infra import settings
from scripts.parser import ArgumentParser

REPO = Path(__file__).resolve().parents[1]

# What each command's positional arguments name, in order (`platform promote <env> <env>`).
POSITIONALS: dict[str, tuple[str, ...]] = {
    "deploy": ("envs",),
    "deploy-infra": ("envs",),
    "destroy": ("envs",),
    "deploy-local": ("envs",),
    "destroy-local": ("envs",),
    "promote": ("envs", "envs"),
    "image": ("images", "envs"),
    "new-env": ("",),
    "pin": ("envs", "", ""),
    "rollback": ("envs", ""),
    "blue-green": ("envs", ""),
    "completion": ("shells",),
}
# Flags whose value names one of these.
FLAG_VALUES = {"--env": "envs", "--from": "envs", "--recipe": "recipes", "--shell": "shells"}
SHELLS = ("bash", "zsh")


def _top_level_keys(path: Path) -> list[str]:
    return re.findall(r"^([a-z0-9][a-z0-9._-]*):", path.read_text(), re.M) if path.exists() else []


def names(kind: str) -> list[str]:
    """The names a completion of `kind` offers, read from the repository's files (standard library only)."""

    if kind == "envs":
        folder = settings.ENVIRONMENTS_DIR.path() or REPO / "infra" / "environments"
        # Only names an environment may have (infra/config/loading.py ENVIRONMENT_NAME): a file named
        # `$(touch x).yaml` is no environment, and its name never reaches the shell.
        return sorted(p.stem for p in folder.glob("*.yaml") if re.fullmatch(r"[a-z][a-z0-9-]*", p.stem))
    if kind == "images":
        return _top_level_keys(REPO / "images" / "images.yaml")
    if kind == "recipes":
        return _top_level_keys(REPO / "workloads" / "trainer" / "recipes.yaml")
    if kind == "shells":
        return list(SHELLS)
    return []


def flags(command: str) -> list[str]:
    """The long flags `platform <command> --help` lists."""
    from scripts.cli import run

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        run(command, ["--help"])
    return sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", out.getvalue())) - {"--help"})


def script(shell: str) -> str:
    """The completion script for `shell`."""
    from scripts.cli import COMMANDS

    cases = "\n".join(
        f"    {shlex.quote(name)}) flags={shlex.quote(' '.join(flags(name)))}; "
        f"kinds={shlex.quote(' '.join(k or '-' for k in POSITIONALS.get(name, ())))} ;;"
        for name in COMMANDS
    )
    values = "\n".join(f"    {flag}) kind={kind} ;;" for flag, kind in FLAG_VALUES.items())
    prelude = "autoload -U +X bashcompinit && bashcompinit\n" if shell == "zsh" else ""
    return f"""# platform's {shell} completion (python -m scripts.completion); eval "$(platform completion {shell})"
{prelude}_platform() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}} flags="" kinds="" kind=""
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W {shlex.quote(" ".join(COMMANDS))} -- "$cur")); return
  fi
  case "${{COMP_WORDS[1]}}" in
{cases}
  esac
  case "$prev" in
{values}
  esac
  if [ -z "$kind" ] && [[ "$cur" != -* ]]; then
    local i n=0
    for ((i = 2; i < COMP_CWORD; i++)); do [[ "${{COMP_WORDS[i]}}" == -* ]] || n=$((n + 1)); done
    set -- $kinds; shift "$n" 2>/dev/null && kind=${{1:-}}
  fi
  if [ -n "$kind" ] && [ "$kind" != - ]; then
    # Each name as a word, matched here: compgen -W would expand what a name holds ($(...), backticks).
    local word; COMPREPLY=()
    while IFS= read -r word; do [[ "$word" == "$cur"* ]] && COMPREPLY+=("$word"); done \
      < <(platform __complete "$kind" 2>/dev/null)
  else
    COMPREPLY=($(compgen -W "$flags" -- "$cur"))
  fi
}}
complete -F _platform platform
"""


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m scripts.completion", description=__doc__.split("\n\n")[0])
    parser.add_argument("shell", choices=SHELLS, help='the shell: eval "$(platform completion bash)" in its rc file')
    args = parser.parse_args(argv)
    print(script(args.shell), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
