"""infra/cdk/lazy_providers.js, loaded into jsii's Node kernel: a provider's bindings load a resource module when a
stack first uses it, and what they load is the module an eager load gives. That the synthesized stacks are the same
byte for byte is what tests/test_snapshots.py holds (its stacks were recorded with every module loaded at once)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import infra
from infra.cdk import PROVIDER_PACKAGES

HOOK = infra.LAZY_PROVIDERS
# A line that loads a resource module at once, as the bindings' generated index has it.
EAGER = re.compile(r"^exports\.[\w$]+ = __importStar\(require\(", re.MULTILINE)

# The shape TypeScript emits for `export * as name from './path'` (the providers' lib/index.js), with two modules.
INDEX = """"use strict";
var __importStar = (this && this.__importStar) || function (mod) { return mod; };
Object.defineProperty(exports, "__esModule", { value: true });
exports.computeInstance = exports.storageBucket = void 0;
exports.computeInstance = __importStar(require("./compute-instance"));
exports.storageBucket = __importStar(require("./storage-bucket"));
exports.notAModule = 1;
"""


def _node(script: str, cwd: Path, stdin: str = "", hook: bool = True) -> str:
    env = {**os.environ, "NODE_OPTIONS": f'--require "{HOOK}"' if hook else ""}
    done = subprocess.run(
        ["node", "-e", script, str(HOOK)], cwd=cwd, input=stdin, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_resource_module_is_loaded_when_first_read_and_is_the_module_itself(tmp_path: Path) -> None:
    lib = tmp_path / "node_modules" / "@cdktn" / "provider-google" / "lib"
    for name in ("compute-instance", "storage-bucket"):
        (lib / name).mkdir(parents=True)
        (lib / name / "index.js").write_text(f'(globalThis.loaded ||= []).push("{name}"); exports.name = "{name}";')
    (lib / "index.js").write_text(INDEX)
    script = """
        const p = require("@cdktn/provider-google/lib/index.js");
        const before = [...(globalThis.loaded || [])];
        const first = p.computeInstance;
        console.log(JSON.stringify({
          before, after: globalThis.loaded, keys: Object.keys(p), name: first.name,
          same: p.computeInstance === first, other: p.notAModule,
        }));
        """
    assert json.loads(_node(script, tmp_path)) == {
        "before": [],
        "after": ["compute-instance"],
        "keys": ["storageBucket", "computeInstance", "notAModule"],
        "name": "compute-instance",
        "same": True,
        "other": 1,
    }
    eager = json.loads(_node(script, tmp_path, hook=False))
    assert eager["before"] == ["compute-instance", "storage-bucket"]
    assert eager["keys"] == ["storageBucket", "computeInstance", "notAModule"]


@pytest.mark.parametrize("provider", sorted(PROVIDER_PACKAGES))
def test_every_resource_module_of_each_pinned_provider_is_loaded_lazily(provider: str, tmp_path: Path) -> None:
    """The pinned bindings' own index, each of its `require`s made lazy: none is left eager."""
    import importlib.util

    spec = importlib.util.find_spec(PROVIDER_PACKAGES[provider])
    assert spec is not None and spec.origin is not None
    (tarball,) = (Path(spec.origin).parent / "_jsii").glob("*.jsii.tgz")
    with tarfile.open(tarball) as archive:
        member = archive.extractfile("package/lib/index.js")
        assert member is not None
        source = member.read().decode()
    eager = len(EAGER.findall(source))
    said = json.loads(
        _node(
            'const {lazy} = require(process.argv[1]); const s = lazy(require("fs").readFileSync(0, "utf8"));'
            "const eager = /^exports\\.[\\w$]+ = __importStar\\(require\\(/gm;"
            "console.log(JSON.stringify({left: (s.match(eager) || []).length, made: s.split('get() {').length - 1}));",
            tmp_path,
            source,
        )
    )
    assert eager > 0 and said == {"left": 0, "made": eager}


def test_the_trainers_image_which_copies_infra_without_its_cdk_gets_no_node_option(tmp_path: Path) -> None:
    """workloads/trainer/Dockerfile copies infra/__init__.py, not infra/cdk: a Node started there must not be told
    to require a file that is not there. From a checkout, any import of infra gives jsii's kernel the lazy loading
    and silences its Node 20 banner (which went into every synthesizing command's output run without make)."""
    (tmp_path / "infra").mkdir()
    (tmp_path / "infra" / "__init__.py").write_text(Path(infra.__file__).read_text())
    jsii = ("NODE_OPTIONS", "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION")
    env = {k: v for k, v in os.environ.items() if k not in jsii}
    done = subprocess.run(
        [sys.executable, "-c", "import infra, os; print(os.environ.get('NODE_OPTIONS'))"],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "None"
    here = subprocess.run(
        [
            sys.executable,
            "-c",
            "import infra, os; print(os.environ['NODE_OPTIONS']); print(os.environ['" + jsii[1] + "'])",
        ],
        cwd=Path(infra.__file__).parents[1],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert here.stdout.split("\n")[:2] == [f'--require "{HOOK}"', "20"]
