"""The Supervisor (U1-U7): periodic, bounded sweeps that request recovery, never do the work."""
