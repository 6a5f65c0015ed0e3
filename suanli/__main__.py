from suanli.cli import main

raise SystemExit(main())
