"""forge-kubesim's fate-sharing supervisor of one container's processes.

Run as `python3 fate_share.py PROGRAM ARGS...` as the leader of a fresh process group.
It runs the program in that group and waits for it. Should the emulator that started it
go away (it is killed, or its process ends) before the program does, the supervisor is
re-parented, sees its parent change and kills the whole process group: no raylet, GCS
or Ray worker outlives the emulator. Deleting the pod kills the group from the
emulator's side (`kill -KILL -- -PGID`). Ray's processes stay in the group: none of
them starts a session of its own.
"""

import os
import signal
import subprocess
import sys


def main():
    parent = os.getppid()
    child = subprocess.Popen(sys.argv[1:])
    while True:
        try:
            return child.wait(timeout=0.25)
        except subprocess.TimeoutExpired:
            if os.getppid() != parent:
                os.killpg(0, signal.SIGKILL)


if __name__ == "__main__":
    code = main()
    sys.exit(code if code >= 0 else 128 - code)
