"""README.md's ``python`` blocks run as written: in order, in one namespace, on CPU, against a local Hub.

They run in a fresh interpreter (nothing earlier tests registered leaks in),
with the Triton interpreter and no GPU, in a directory that holds ``build/``
(the Local build section), with ``HF_ENDPOINT`` set to a local Hub of their
own to which the kernel is published as ``org/fused-geglu``. That Hub does not
trust ``org``, so the blocks load only because they pass
``trust_remote_code=True``, as README tells users to. ``model_path`` is the
tiny random Gemma3 that a block saves in the working directory.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from geglu_triton import REPO_ROOT
from geglu_triton.publish import publish
from child_process import child_env

README = REPO_ROOT / "README.md"
README_REPO = "org/fused-geglu"
# Every API README teaches must appear in a block that this test runs.
DOCUMENTED_CALLS = ("get_kernel(", "KernelConfig(", "kernelize(", "kernelize_geglu_mlps(", "get_local_kernel(")

_PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)

# Runs the blocks as one script would, then reports what they left behind.
_RUNNER = """
import json, sys
blocks = json.loads(open(sys.argv[1]).read())
namespace = {}
for number, block in enumerate(blocks, 1):
    exec(compile(block, f"README.md python block {number}", "exec"), namespace)
from geglu_triton.models import check_geglu_mlps
print("fused MLPs:", check_geglu_mlps(namespace["model"]))
print("out:", tuple(namespace["out"].shape), namespace["out"].device.type)
"""


def python_blocks(markdown: str) -> list[str]:
    return _PYTHON_BLOCK.findall(markdown)


@pytest.fixture(scope="module")
def readme_hub(tmp_path_factory, build_dir):
    """A local Hub that trusts no organization, with this checkout's kernel published as org/fused-geglu."""
    from huggingface_hub import HfApi

    from geglu_triton.hub.background import LocalHub

    token = os.environ["HF_TOKEN"]
    with LocalHub(tmp_path_factory.mktemp("readme-hub"), port=0, trusted_orgs=(), token=token) as hub:
        api = HfApi(endpoint=hub.endpoint, token=token)
        publish(build_dir, README_REPO, api=api, allow_dirty=True, import_check=False, echo=lambda _line: None)
        yield hub


def test_readme_python_blocks_run_as_written(readme_hub, build_dir, tmp_path):
    blocks = python_blocks(README.read_text())
    missing = [call for call in DOCUMENTED_CALLS if not any(call in block for block in blocks)]
    assert not missing, f"README's python blocks no longer show {missing}"

    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    (tmp_path / "build").symlink_to(build_dir, target_is_directory=True)
    env = child_env(
        HF_ENDPOINT=readme_hub.endpoint,
        HF_HOME=str(tmp_path / "hf-home"),
        CUDA_VISIBLE_DEVICES="",
        TRITON_INTERPRET="1",
    )
    result = subprocess.run(
        [sys.executable, "-c", _RUNNER, str(tmp_path / "blocks.json")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "fused MLPs: ['model.layers.0.mlp', 'model.layers.1.mlp']" in result.stdout
    assert "out: (2, 16, 256) cpu" in result.stdout


def test_python_blocks_are_found_in_order():
    text = "x\n```python\na = 1\n```\n```bash\nnot python\n```\n```python\nb = a\n```\n"
    assert python_blocks(text) == ["a = 1\n", "b = a\n"]
