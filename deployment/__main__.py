import sys

from deployment.supervisor import main

sys.exit(main())
