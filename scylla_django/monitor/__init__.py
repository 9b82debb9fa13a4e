"""The monitor: small maintenance services, each with its own interval, run by one `Monitor`.

- `ExpiredLeases` (`leases`): expired leases made ready again, or their tasks aborted.
- `FollowUps` (`followups`): follow-ups released, or cancelled after a failed parent.
- `BatchCallbacks` (`callbacks`): batch callbacks released, or cancelled when they cannot run.
- `Deliveries` (`deliveries`): the delivery tasks of completion notifications submitted.
- `ScheduleTicks` (`schedules`): the settings' schedules synced, due ticks submitted.
- `PriorityAging` (`aging`): the priority of tasks waiting in a queue with `aging` raised.
- `LimitSettings` (`limits`): the limits and rates whose settings changed set to them.
- `SettingsNames` (`peers`): what this monitor's settings define, said to the monitors
  running beside it (a rolling deploy), and theirs read back.
- `FinishedTasks` and `ProcessRecords` (`purge`): terminal tasks, and the records of workers
  and monitors long gone, purged after their retention.
- `QueueRollups` (`rollups`): History's settled minutes rolled up per queue for the
  dashboard's charts, and rollups past the retention purged.

Each service is a `Service` whose `wait_for_run()` tests wait on instead of sleeping.
`Monitor` (`monitor`) runs them and is the one place that retries through database errors.
"""

from .aging import PriorityAging
from .callbacks import BatchCallbacks
from .deliveries import Deliveries
from .followups import FollowUps
from .leases import ExpiredLeases
from .limits import LimitSettings
from .monitor import Monitor, MonitorPass
from .purge import FinishedTasks, ProcessRecords
from .rollups import QueueRollups
from .schedules import ScheduleTicks
from .service import Service

__all__ = [
    "BatchCallbacks",
    "Deliveries",
    "ExpiredLeases",
    "FinishedTasks",
    "FollowUps",
    "LimitSettings",
    "Monitor",
    "MonitorPass",
    "PriorityAging",
    "ProcessRecords",
    "QueueRollups",
    "ScheduleTicks",
    "Service",
]
