"""An order service that stores each order in a database and emits its event to the log, both
or neither, with exactly.dualwrite. `python -m examples.order_service --help`."""

from examples.order_service.service import OrderService

__all__ = ["OrderService"]
