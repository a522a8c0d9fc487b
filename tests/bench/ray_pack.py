"""Ray's own `working_dir` packaging of a directory, timed (tests/bench/run.sh).

What `ray.init(runtime_env={"working_dir": DIR})` / `ray job submit --working-dir`
does locally before uploading: hash the tree for the package URI
(`get_uri_for_directory`, SHA-1 of every path and file) and write the zip
(`create_package`). The upload itself (to the GCS, refused above 512 MiB) is not timed.

    python ray_pack.py TREE OUT_ZIP ROUNDS

Prints one `BENCH capsule.ray secs=<best of ROUNDS>` line.
"""

import logging
import sys
import time
from pathlib import Path

from ray._private.runtime_env.packaging import create_package, get_uri_for_directory


def main() -> None:
    tree, out, rounds = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    quiet = logging.getLogger("ray-pack-bench")
    quiet.setLevel(logging.ERROR)
    best = float("inf")
    for _ in range(rounds):
        out.unlink(missing_ok=True)
        started = time.perf_counter()
        uri = get_uri_for_directory(tree, include_gitignore=False)
        create_package(tree, out, include_gitignore=False, logger=quiet)
        best = min(best, time.perf_counter() - started)
    size = out.stat().st_size
    out.unlink()
    print(f"ray working_dir package {uri}: {size} bytes, {best:.3f} s (best of {rounds})")
    print(f"BENCH capsule.ray secs={best:.3f}")


if __name__ == "__main__":
    main()
