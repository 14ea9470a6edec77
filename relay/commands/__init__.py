"""Administrative commands: each module has ``run(args)``, called by relay.cli through its table.

None of them imports gevent; each imports what it needs when it runs.
"""

from collections.abc import Mapping
from typing import Any, TypeAlias

# docopt's parsed arguments, as each ``run`` gets them. A value's type depends on the usage text
# (str or None for an option with a value or a positional, bool for a flag or a command word,
# list[str] for a repeated one), which is why docopt itself gives them as Any.
Arguments: TypeAlias = Mapping[str, Any]
