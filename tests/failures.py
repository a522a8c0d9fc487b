#!/usr/bin/env python3
"""What each failing test said, from a `cargo test` log: printed last by tests/run.sh.

A failing test's section of libtest's output ("---- name stdout ----") begins with
everything the test logged, and a test under load can log thousands of lines before it
panics: CI shows the head and the tail of a run's output, and the panic message ended up
in neither. This prints, for every failing test, only its panic messages (the line that
says where, and the message up to its backtrace or the next section), each cut to a
bounded number of lines.

Usage: failures.py LOG
"""

import re
import sys

# A doctest's name has spaces ("src/x.rs - f (line 3)").
SECTION = re.compile(r"^---- (.+) stdout ----$")
PANIC = re.compile(r"^thread '.*'( \(\d+\))? panicked at ")
# Where a panic message ends: its backtrace, libtest's hint, the next section, or the
# list of failures libtest prints after the sections.
END = re.compile(r"^(stack backtrace:|note: run with|---- .+ stdout ----$|failures:$)")
MAX_LINES = 40
MAX_PANICS = 3


def panics(lines):
    """(test name, [panic message lines]) for each failing test's section."""
    test, found, current = None, [], None
    for line in lines:
        section = SECTION.match(line)
        if section:
            if test is not None:
                yield test, found
            test, found, current = section.group(1), [], None
            continue
        if test is None:
            continue
        if PANIC.match(line):
            current = [line]
            found.append(current)
        elif current is not None:
            if END.match(line):
                current = None
            else:
                current.append(line)
        if line == "failures:":
            yield test, found
            test, found, current = None, [], None
    if test is not None:
        yield test, found


def main():
    with open(sys.argv[1], encoding="utf-8", errors="replace") as f:
        lines = [line.rstrip("\n") for line in f]
    failing = list(panics(lines))
    if not failing:
        return
    print(f"\n==> what the {len(failing)} failing test(s) said (the panics in their output above)")
    for test, found in failing:
        print(f"\n--- {test}")
        if not found:
            print("    (no panic message in its output: see its section above)")
        # The test's own thread (named after it) says why it failed; a runtime
        # worker's panic often comes first and is only a consequence, or a cause.
        found.sort(key=lambda message: not message[0].startswith(f"thread '{test}'"))
        for message in found[:MAX_PANICS]:
            while message and not message[-1].strip():
                message.pop()
            for line in message[:MAX_LINES]:
                print(f"    {line}")
            if len(message) > MAX_LINES:
                print(f"    [... {len(message) - MAX_LINES} more lines]")
        if len(found) > MAX_PANICS:
            print(f"    [... {len(found) - MAX_PANICS} more panics]")


if __name__ == "__main__":
    main()
