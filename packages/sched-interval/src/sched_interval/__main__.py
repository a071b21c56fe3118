"""``python -m sched_interval VALUE ...``: see `sched_interval._cli`."""

from ._cli import main

raise SystemExit(main())
