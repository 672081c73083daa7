from omegitops.cli import main

raise SystemExit(main())
