"""The nouns of eopt and their files: units, operating points, contexts, signatures,
libraries, plans, schedules, traces, frontier tables, and the one validation layer."""
