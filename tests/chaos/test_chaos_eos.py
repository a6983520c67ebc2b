#!/usr/bin/python3
"""The short chaos run of test_chaos.py with kafka.exactly_once on
(issue 21): every fault kind at least once, the same ledger checks, and 0
duplicates read with isolation.level=read_committed."""

import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_chaos  # noqa: E402

if __name__ == "__main__":
    sys.exit(test_chaos.main(extra=["--exactly-once"],
                             name="test_chaos_eos.py"))
