"""Reduce oha's JSON report (stdin) to one RESULT line: requests, rate served, answers
that are not 2xx (errors count as not 2xx; the requests oha
aborts when the duration ends do not), p50 and p99 latency."""

import json
import sys


def main() -> None:
    name = sys.argv[1]
    report = json.load(sys.stdin)
    codes = {int(code): n for code, n in report["statusCodeDistribution"].items()}
    # The requests in flight when the duration ends are aborted by oha, not failed.
    errors = sum(
        n
        for error, n in report.get("errorDistribution", {}).items()
        if "aborted due to deadline" not in error
    )
    not_2xx = sum(n for code, n in codes.items() if not 200 <= code < 300) + errors
    rate = report["summary"]["requestsPerSec"]
    pct = report["latencyPercentiles"]
    p50 = round((pct["p50"] or 0) * 1e6)
    p99 = round((pct["p99"] or 0) * 1e6)
    print(
        f"{name} RESULT requests={sum(codes.values()) + errors} rps={rate:.1f} "
        f"non2xx={not_2xx} p50_us={p50} p99_us={p99}"
    )


if __name__ == "__main__":
    main()
