from oaishim.commands.main import main

raise SystemExit(main())
