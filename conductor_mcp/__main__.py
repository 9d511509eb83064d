from conductor_mcp.cli.commands import main

raise SystemExit(main())
