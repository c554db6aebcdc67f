"""The repository card (README.md of the Hub repository's ``main`` branch).

Rendered by ``publish`` from the build itself (the variants' metadata.json and
the built package) for the repository it publishes to, and uploaded as
``README.md``, the way kernel-builder fills its card template (kernel-builder's
card.rs, examples/kernels/relu-triton/CARD.md). It carries
the same sections in our words: YAML front matter, how to load the kernel with
``get_kernel(repo_id, version=N)``, the public functions (the package's
``__all__`` without ``layers``), the layers (the classes of ``layers.py`` when
``__all__`` exports ``layers``) and how to run the benchmarks. On top of that,
when the kernel has a ``GeGLUMLP`` layer, the recipe to kernelize a Gemma MLP.

The package is read statically (with ``ast``), never imported: rendering the
card must work without torch, triton or a GPU.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from kernels._rust import Metadata

from . import layout

_GEMMA_LAYER = "GeGLUMLP"
_LAYERS_EXPORT = "layers"


def exported_names(init_path: Path) -> list[str]:
    """The string entries of a module-level ``__all__ = [...]`` (or tuple) in ``init_path``; [] if none."""
    tree = ast.parse(init_path.read_text(encoding="utf-8"), filename=str(init_path))
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
            and isinstance(node.value, (ast.List, ast.Tuple))
        ):
            return [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def layer_classes(package_dir: Path) -> list[str]:
    """The top-level classes of the package's ``layers`` module (``layers.py`` or ``layers/__init__.py``)."""
    for path in (package_dir / "layers.py", package_dir / "layers" / layout.INIT_FILE):
        if path.is_file():
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            return [node.name for node in tree.body if isinstance(node, ast.ClassDef)]
    return []


def _front_matter(license: str | None, backends: list[str]) -> str:
    # JSON strings are valid YAML scalars, so names with odd characters stay safe.
    license_line = f"license: {json.dumps(license.lower())}\n" if license else ""
    tags = "".join(f"- {json.dumps(tag)}\n" for tag in ("kernels", "triton", *backends))
    return f"---\nlibrary_name: kernels\n{license_line}tags:\n{tags}---\n"


def _usage(repo_id: str, version: int, functions: list[str]) -> str:
    if not functions:
        return "## How to use\n\nUsage example not available.\n"
    first = functions[0]
    return f"""## How to use

```python
# pip install -U kernels
from kernels import get_kernel

# Kernels from organizations that are not trusted publishers need
# get_kernel(..., trust_remote_code=True); the kernel's Hub page shows
# whether its publisher is trusted.
kernel_module = get_kernel("{repo_id}", version={version})
{first} = kernel_module.{first}

{first}(...)
```
"""


def _bullets(title: str, names: list[str], empty: str) -> str:
    body = "".join(f"- `{name}`\n" for name in names) if names else f"{empty}\n"
    return f"## {title}\n\n{body}"


def _gemma_recipe(repo_id: str, version: int) -> str:
    return f"""## Kernelizing a Gemma model

No Gemma MLP class of transformers declares a Hub kernel layer, so give the
class the layer name first; then map that name to this repository and call
`kernelize`. The forward of every `Gemma3MLP` (`down_proj(act_fn(gate_proj(x)) * up_proj(x))`)
then runs the fused GeGLU kernel.

```python
import torch
from kernels import LayerRepository, Mode, kernelize, register_kernel_mapping, replace_kernel_forward_from_hub
from transformers import AutoModelForCausalLM
from transformers.models.gemma3.modeling_gemma3 import Gemma3MLP

replace_kernel_forward_from_hub(Gemma3MLP, "{_GEMMA_LAYER}")
register_kernel_mapping(
    {{
        "{_GEMMA_LAYER}": {{
            "cuda": LayerRepository("{repo_id}", layer_name="{_GEMMA_LAYER}", version={version}),
        }}
    }}
)

model = AutoModelForCausalLM.from_pretrained("google/gemma-3-1b-it", dtype=torch.bfloat16).to("cuda")
model = kernelize(model, mode=Mode.INFERENCE)
```

For `GemmaMLP`, `Gemma2MLP` and the other Gemma MLP classes, replace `Gemma3MLP` above.
"""


def _benchmarks(repo_id: str, version: int, has_benchmarks: bool) -> str:
    """How to run the benchmark scripts of the version branch.

    Not ``kernels benchmark <repo_id> --version N``: kernels (0.17.2 and its
    main branch as of 2026-08) downloads that repository as a *model*
    repository (``/api/models/...``), and the Hub serves kernel repositories
    only under the kernel routes (its model-type copies of kernels were
    taken down on 2026-09-13, kernels' docs/source/migration.md). So the card
    has the branch downloaded as a kernel repository and the scripts run from
    that directory, which ``kernels benchmark`` accepts as a local path.
    """
    if not has_benchmarks:
        return "## Benchmarks\n\nNo benchmark available yet.\n"
    local_dir = f"{repo_id.split('/')[-1]}-v{version}"
    return f"""## Benchmarks

The benchmark scripts of version {version} are in `benchmarks/` of the `v{version}` branch. Download the
branch as a kernel repository, then run them with `kernels benchmark` (`pip install 'kernels[benchmark]'`):

```bash
hf download {repo_id} --repo-type kernel --revision v{version} --local-dir {local_dir}
kernels benchmark ./{local_dir}
```
"""


def render_card(variants: list[Path], *, repo_id: str, has_benchmarks: bool) -> str:
    """The card of a build, given its variant directories (which carry the same package and version)."""
    metadata = [Metadata.read_from_file(variant / layout.METADATA_FILE) for variant in variants]
    version = metadata[0].version
    backends = [str(m.backend.backend_type) for m in metadata]
    package_dir = variants[0]
    names = exported_names(package_dir / layout.INIT_FILE)
    functions = [name for name in names if name != _LAYERS_EXPORT]
    layers = layer_classes(package_dir) if _LAYERS_EXPORT in names else []

    sections = [
        _front_matter(metadata[0].license, backends),
        f"This is the repository card of `{repo_id}`, a kernel for the "
        "[`kernels` library](https://github.com/huggingface/kernels), "
        f"written in Triton and built for the backends: {', '.join(backends)}. "
        "This card was generated when the kernel was published.\n",
        _usage(repo_id, version, functions),
        _bullets("Available functions", functions, "Function list not available."),
    ]
    if layers:
        sections.append(_bullets("Available layers", layers, ""))
    if _GEMMA_LAYER in layers:
        sections.append(_gemma_recipe(repo_id, version))
    sections.append(_benchmarks(repo_id, version, has_benchmarks))
    return "\n".join(sections)
