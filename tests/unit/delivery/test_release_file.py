"""Writing an environment file (make pin, rollback, promote, blue-green): atomic, through a link into its target,
refused clearly where it cannot be written, and a refusal names the file at fault (review round 4)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from infra.config import ConfigError
from infra.delivery.release_file import write_validated
from tests.helpers import REPO


def _edited(path: Path) -> str:
    return path.read_text().replace("# ", "#  ", 1)


def test_a_write_through_a_link_changes_its_target_and_keeps_the_link(folder: Path, tmp_path: Path) -> None:
    target = tmp_path / "kept" / "dev.yaml"
    target.parent.mkdir()
    (folder / "dev.yaml").rename(target)
    (folder / "dev.yaml").symlink_to(target)
    text = _edited(target)
    write_validated(folder / "dev.yaml", text)
    assert (folder / "dev.yaml").is_symlink() and target.read_text() == text


def test_a_folder_the_user_cannot_write_is_refused_naming_the_file_and_nothing_changes() -> None:
    """As the user who runs it (not root, who writes anywhere): a bare PermissionError traceback before."""
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        folder = Path(tmp) / "environments"
        shutil.copytree(REPO / "infra" / "environments", folder)
        Path(tmp).chmod(0o755)
        folder.chmod(0o555)
        before = (folder / "dev.yaml").read_text()
        probe = (
            "import sys\n"
            "from pathlib import Path\n"
            "from infra.config import ConfigError\n"
            "from infra.delivery.release_file import write_validated\n"
            "path = Path(sys.argv[1])\n"
            "try:\n"
            "    write_validated(path, path.read_text().replace('# ', '#  ', 1))\n"
            "except ConfigError as err:\n"
            "    print(err)\n"
        )
        command = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-c", probe]
        done = subprocess.run(
            [*command, str(folder / "dev.yaml")], cwd=REPO, capture_output=True, text=True,
            env={"PATH": "/usr/bin:/bin", "HOME": tmp, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        assert f"{folder / 'dev.yaml'}: cannot write it: Permission denied (the file is as it was)" in done.stdout
        assert (folder / "dev.yaml").read_text() == before
        assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == [], "no staging file left behind"


def test_a_refusal_caused_by_another_environments_file_names_that_file(folder: Path) -> None:
    (folder / "prod.yaml").write_text((folder / "prod.yaml").read_text().replace("name: prod", "name: prodd", 1))
    with pytest.raises(ConfigError) as err:
        write_validated(folder / "dev.yaml", _edited(folder / "dev.yaml"))
    assert err.value.path == folder / "prod.yaml"
