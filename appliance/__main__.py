import sys

from rocketbox.appliance.process import set_up

set_up()        # before numpy loads (the CLI's imports load it)

from rocketbox.appliance.cli import main  # noqa: E402

sys.exit(main())
