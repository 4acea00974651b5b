"""A rank's memory does not grow with the corpus: the training samples are read window by window from the token
cache (train/tokens.py, os.pread), so reading batches spread over a 200 MB token file peaks at the same RSS as
over a 10 MB one. Measured in fresh processes (ru_maxrss)."""

import subprocess
import sys

import numpy as np

from tests.conftest import REPO

READER = """
import resource, sys
from paradvisor.train.data import RankStream
from paradvisor.train.tokens import PackedTokens
ds = PackedTokens(sys.argv[1], "uint16", 128)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
stream = RankStream(len(ds), [8, 8], 1, seed=0)
for _ in range(400):  # 3,200 windows of 129 tokens, scattered over the whole file
    for i in stream.next():
        assert ds.window(i).shape == (129,)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)
"""


def grown_kib(path) -> int:
    out = subprocess.run(
        [sys.executable, "-c", READER, str(path)], capture_output=True, text=True, timeout=300, cwd=str(REPO)
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


def test_reading_samples_does_not_grow_with_the_corpus(tmp_path):
    sizes = {}
    for mb in (10, 200):
        path = tmp_path / f"{mb}.bin"
        block = np.random.default_rng(0).integers(0, 300, size=1 << 19, dtype=np.uint16).tobytes()  # 1 MB
        with open(path, "wb") as fh:
            for _ in range(mb):
                fh.write(block)
        sizes[mb] = grown_kib(path)
        path.unlink()
    # a memory map or a loaded corpus would grow by ~190 MB here; reading windows grows by a few MB at most
    assert sizes[200] - sizes[10] < 16 * 1024, sizes
