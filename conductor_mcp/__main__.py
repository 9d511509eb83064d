from conductor_mcp.cli import main

raise SystemExit(main())
