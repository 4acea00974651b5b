"""Write tests/data/golden/*.json: the documents paradvisor writes at its seams, made from fixed inputs
(`tests/support/golden.py`). Run it from a known-good tree (issue 26: main's code before the seam types);
`tests/contract/test_golden_documents.py` compares every later tree with these files.

    PYTHONPATH=src:. python tests/data/make_golden.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.golden import GOLDEN, documents, dumps


def main() -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name, doc in documents().items():
        (GOLDEN / f"{name}.json").write_text(dumps(doc))
        print(GOLDEN / f"{name}.json")


if __name__ == "__main__":
    main()
