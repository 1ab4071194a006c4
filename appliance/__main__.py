import sys

from appliance.cli import main

sys.exit(main())
