"""`python -m ddp_profile.harness ...`: the harness without the CLI's other commands (GPU machines)."""

from ddp_profile.harness.bench import main

raise SystemExit(main())
