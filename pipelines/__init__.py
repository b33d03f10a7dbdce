"""Wiring: partitions, Definitions, sensors, schedules, jobs and the ``situate`` command line."""
