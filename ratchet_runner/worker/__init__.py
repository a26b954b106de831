"""Workers: passes that claim runnable runs under leases and advance them, and the pool of threads
that runs those passes, keeps the leases alive and rides out store outages."""
