"""Deprecated spelling kept for old scripts: `python -m ddp_profile.train` is `python -m ddp_profile.harness`.

Remove once no script types the old name; the loop itself lives in ``ddp_profile/harness/train.py``.
"""

if __name__ == "__main__":
    from ddp_profile.harness.bench import main

    raise SystemExit(main())
