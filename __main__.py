from specviz.app.cli import main

raise SystemExit(main())
