"""forge-kubesim's fate-sharing supervisor of one container's processes.

Run as `python3 fate_share.py PROGRAM ARGS...` as the leader of a fresh process group.
It runs the program in that group and waits for it. Should the emulator that started it
go away (it is killed, or its process ends) before the program does, the supervisor is
re-parented, sees its parent change and kills every other process of its group (and
every process marked with the node's FORGE_KUBESIM_REMOVE_AFTER, wherever it went), waits
until they are gone, removes the directory FORGE_KUBESIM_REMOVE_AFTER names (the node's
Ray temp dir), if any, and exits: no raylet, GCS or Ray worker outlives the emulator.
Deleting the pod kills the group from the emulator's side (`kill -KILL -- -PGID`), which
then removes the directory itself. Ray's processes stay in the group: none of them
starts a session of its own.
"""

import os
import shutil
import signal
import subprocess
import sys
import time


def members(pgid, mark):
    """Live (not zombie) processes of process group `pgid`, or whose environment has
    FORGE_KUBESIM_REMOVE_AFTER=`mark` (Ray starts a job's driver in a session of its own)."""
    found = []
    needle = f"FORGE_KUBESIM_REMOVE_AFTER={mark}".encode() if mark else None
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] == "Z":
            continue
        if int(fields[2]) == pgid or (needle and marked(entry, needle)):
            found.append(int(entry))
    return found


def marked(pid, needle):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:
        return False


def end_group(child):
    me, pgid = os.getpid(), os.getpgid(0)
    leftover = os.environ.get("FORGE_KUBESIM_REMOVE_AFTER")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        others = [p for p in members(pgid, leftover) if p != me]
        if not others:
            break
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        child.poll()
        time.sleep(0.05)
    if leftover:
        shutil.rmtree(leftover, ignore_errors=True)


def main():
    parent = os.getppid()
    child = subprocess.Popen(sys.argv[1:])
    while True:
        try:
            return child.wait(timeout=0.25)
        except subprocess.TimeoutExpired:
            if os.getppid() != parent:
                end_group(child)
                return 137


if __name__ == "__main__":
    code = main()
    sys.exit(code if code >= 0 else 128 - code)
