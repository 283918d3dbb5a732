from lockscope.cli import main

raise SystemExit(main())
