"""The one attribution engine: a trace's energy charged to its events."""
