"""Run an entry point's `main(argv)` in the test's own process, as `python -m <module>` would in a child.

A child process loads the provider bindings' jsii runtime again (seconds) for every call; in the test's process it
is loaded once. What the child would have had is given explicitly: `env` as os.environ, `cwd` as the working
directory, and its output (and its own children's) captured at file descriptors 1 and 2, so the result reads as
subprocess.run(..., capture_output=True, text=True)'s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


def run_main(
    main: Callable[[list[str]], int], argv: Sequence[str], *, env: Mapping[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_streams = sys.stdout, sys.stderr
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - closed below
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        try:
            code = main(list(argv))
        except SystemExit as exit_:  # argparse's usage errors, as the child's exit code
            code = exit_.code if isinstance(exit_.code, int) else 1
        finally:
            sys.stdout.close()
            sys.stderr.close()
            sys.stdout, sys.stderr = saved_streams
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            os.close(saved_fds[0])
            os.close(saved_fds[1])
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    return subprocess.CompletedProcess([f"main({list(argv)})"], code, stdout, stderr)
