"""Print the README's model-level table from one or more ``bench --models`` results.

Reads the ``models.json`` that ``python -m geglu_triton bench --models`` wrote
(several, when sizes ran in separate calls: a later file's size replaces an
earlier one's) and prints the table as ``readme_table.md`` has it, then where
results differ from eager's. Nothing is measured here.

    python benchmarks/models_table.py RUN/models.json [OTHER/models.json ...] [--out table.md]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional

from geglu_triton.benchmarking import model_report


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+")
    parser.add_argument("--out", type=Path, help="also write the markdown here")
    args = parser.parse_args(argv)
    try:
        results = model_report.merged([json.loads(path.read_text()) for path in args.results])
    except (OSError, json.JSONDecodeError, KeyError, ValueError) as err:
        raise SystemExit(f"models_table: {type(err).__name__}: {err}") from None
    text = model_report.readme_table_markdown(results) + "\n" + model_report.differences_markdown(results)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
