"""Multi-device build and run."""
