from ddp_profile.cli import main

raise SystemExit(main())
