"""harness.launch's stack dump for runs that never end: DDP_PROFILE_STACK_DUMP_S arms faulthandler's watchdog."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ddp_profile.harness.launch import STACK_DUMP_ENV, arm_stack_dump

ROOT = Path(__file__).resolve().parents[2]

WAITS = """
import time
from ddp_profile.harness.launch import arm_stack_dump

def waits_like_a_hung_rank():
    time.sleep(1.5)

print(arm_stack_dump(), flush=True)
waits_like_a_hung_rank()
"""


def _child(value: str) -> subprocess.CompletedProcess:
    env = {**os.environ, STACK_DUMP_ENV: value, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", WAITS], env=env, capture_output=True, text=True, timeout=60, cwd=ROOT
    )


def test_a_waiting_process_prints_where_it_waits():
    done = _child("0.4")
    assert done.returncode == 0 and done.stdout.strip() == "0.4"
    assert "waits_like_a_hung_rank" in done.stderr and "most recent call first" in done.stderr


def test_off_when_unset_and_a_bad_value_is_a_note_not_a_dump():
    assert arm_stack_dump({}) is None and arm_stack_dump({STACK_DUMP_ENV: " "}) is None
    done = _child("soon")
    assert done.returncode == 0 and done.stdout.strip() == "None"
    assert done.stderr.strip().splitlines() == [
        f"note: {STACK_DUMP_ENV}='soon' is not a number of seconds; no stack dumps"
    ]
