"""scylla_django: a reliable task scheduler in your Django project's own database.

Clients submit tasks; workers lease, heartbeat and finish them; a monitor resets expired leases
and purges old terminal tasks. See the README for a tour.
"""

from .exceptions import Abort
from .handlers import handler
from .retries import Exponential, Fixed, Retry

__all__ = ["Abort", "Exponential", "Fixed", "Retry", "handler"]
__version__ = "0.1.0"
