package targets

import "os"

var getenv = os.Getenv
