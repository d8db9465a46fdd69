from oaishim.cli import main

raise SystemExit(main())
